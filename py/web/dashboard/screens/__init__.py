"""The dashboard's screens, one module each; every module exports ``PAGES``."""
