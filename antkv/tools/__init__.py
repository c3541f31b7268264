"""Command-line tools: ``antkv`` (``python -m antkv``) and the file dumps."""
