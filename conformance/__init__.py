"""The conformance kit: a pytest plugin that judges any TokenSink / TokenSource."""
