"""Reference implementations of the token-capture contract."""
