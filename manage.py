#!/usr/bin/env python
"""Django's command-line utility for the chat front."""

import os
import sys


def main() -> None:
    """Run the Django command named on the command line with the front's settings."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "oaifront.settings")
    from django.core.management import execute_from_command_line  # noqa: PLC0415 - after the settings are chosen

    from oaifront.startup import one_line_configuration_errors  # noqa: PLC0415 - after the settings are chosen

    with one_line_configuration_errors():  # a setting the front cannot use: one line, no traceback
        execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
