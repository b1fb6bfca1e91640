"""The kit's checks, one module per clause family. Importing a module registers its checks."""
