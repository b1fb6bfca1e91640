"""What the checks of the staging contract (the STAGE family) are built from."""
