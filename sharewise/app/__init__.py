"""The application layer: one function per command, taking typed options and returning a result object."""
