"""The test module the plugin collects: one pytest test function per clause family."""
