"""The one rule for handing out a stored file's bytes (an upload, or what a browser downloaded): a download."""
import io

from flask import send_file

# Never rendered by a browser on the API's origin, whatever the file holds (a downloaded page's script would
# run there), never sniffed into something else, never kept in a cache.
SERVED_FILE_HEADERS = {"X-Content-Type-Options": "nosniff", "Content-Security-Policy": "sandbox",
                       "Cache-Control": "private, no-store"}


def served(stored):
    """A StoredFile's bytes as an attachment, under its own name and content type."""
    response = send_file(io.BytesIO(stored.data or b""), mimetype=stored.content_type, as_attachment=True,
                         download_name=stored.filename, etag=False, max_age=None)
    response.headers.update(SERVED_FILE_HEADERS)
    return response
