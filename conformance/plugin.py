"""pytest entry point of the kit; inert unless a ``--tokcap-*`` target is given."""
