"""The kit's pytest wing: the only modules of the kit that import pytest.

:mod:`.plugin` holds the hooks :mod:`tokcap_pytest` registers, :mod:`.outcomes` turns an
engine outcome into a pytest pass, failure or skip, :mod:`.verdict` reads test reports back
into the verdict, and ``suite/test_contract.py`` is the test module the plugin collects. All
of them only translate: what a check comes to is decided by :mod:`conformance._engine`.
"""
