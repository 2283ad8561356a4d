#!/usr/bin/env python
"""Django's command-line utility for the chat front."""

import os
import sys


def main() -> None:
    """Run the Django command named on the command line with the front's settings."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "oaifront.settings")
    from django.core.management import execute_from_command_line  # noqa: PLC0415 - after the settings are chosen

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
