"""Browser windows with the extension: registration, the command channel, SDK-compatible extension actions."""
