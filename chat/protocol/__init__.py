"""The wire models of the three APIs and their replies (pydantic, no I/O): the bottom layer above chat.errors."""
