"""Codes and links that arrive out of band (/fast/v2/codes, the SMTP receiver): kept per API key for the tasks
that wait for them (`${code:ID}`, `${link:ID}`)."""
