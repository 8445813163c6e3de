"""Developer tools that are not part of the package: `python -m tools.docs_check`."""
