"""The MANIFEST: version edits, versions and the version set."""
