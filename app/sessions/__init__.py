"""Cloud browser sessions: a server-side browser kept between tasks (and the SDK's config endpoint)."""
