"""Thin command-line layer: parse flags, call the library, render tables or JSON."""
