"""The package version, single-sourced for the build backend."""

__version__ = "0.1.0.dev0"
