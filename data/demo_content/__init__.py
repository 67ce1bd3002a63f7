"""Authored content of the Northwind Platform team memory bank (see ../demo/README.md)."""
