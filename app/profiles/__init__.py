"""Named browser profiles per API key: a sign-in kept between tasks and sessions (docs/profiles.md)."""
