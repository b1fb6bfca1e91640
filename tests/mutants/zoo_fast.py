"""A pytest plugin for quality runs: the kit's properties stop at the first counterexample.

Loaded with ``-p zoo_fast``, it makes Hypothesis skip the shrink phase wherever a check does
not choose its phases itself. Every check still runs and still has to find the bug; only the
work of minimizing the failing program is saved, which a verdict does not need.
"""

from __future__ import annotations

from hypothesis import Phase, settings

settings.register_profile("tokcap-zoo", phases=(Phase.explicit, Phase.reuse, Phase.generate))
settings.load_profile("tokcap-zoo")
