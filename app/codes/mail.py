"""The SMTP receiver (`remote-dispatch mail`, Procfile `mail`): mail forwarded to the service, the recipient
address being the identifier; kept only for the API key that claimed the address, refused (550) for any other."""
import asyncio
import email
import html
import logging
import re
from email import policy

from aiosmtpd.controller import Controller

from ..errors import ApiError
from ..extensions import db
from . import service

log = logging.getLogger(__name__)
MAX_MESSAGE_BYTES = 1024 * 1024


class CodeMail:
    """aiosmtpd handler: RCPT is accepted for claimed addresses only; DATA keeps the message's code and link for
    the key of each recipient. Nothing of a message is logged (its code is a secret)."""

    def __init__(self, app):
        self.app = app

    def _in_app(self, function, *args):
        with self.app.app_context():
            try:
                return function(*args)
            finally:
                db.session.remove()

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        owner = await asyncio.get_running_loop().run_in_executor(None, self._in_app, service.claimant, address)
        if owner is None:
            return "550 5.1.1 No API key has claimed this address (POST /fast/v2/codes/addresses)"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        text = message_text(envelope.original_content or envelope.content)
        kept = await asyncio.get_running_loop().run_in_executor(None, self._in_app, self._keep, envelope.rcpt_tos,
                                                                text)
        log.info("mail for %d recipient(s): kept for %d", len(envelope.rcpt_tos), kept)
        return "250 Message accepted"

    @staticmethod
    def _keep(recipients, text):
        kept = 0
        for address in recipients:
            owner = service.claimant(address)
            if owner is None:
                continue
            try:
                service.receive(owner, address, text, source="mail")
                kept += 1
            except ApiError:  # no code and no link in it: nothing to keep
                pass
        return kept


def message_text(raw):
    """Subject and body of a message (its plain text part, else its HTML part's text with link targets kept)."""
    message = email.message_from_bytes(raw, policy=policy.default)
    body = message.get_body(preferencelist=("plain", "html"))
    content = body.get_content() if body is not None else ""
    if body is not None and body.get_content_type() == "text/html":
        content = re.sub(r"""(?is)<a\s[^>]*href=["']([^"']+)["'][^>]*>""", r" \1 ", content)
        content = html.unescape(re.sub(r"(?s)<[^>]+>", " ", content))
    return f"{message.get('subject', '')}\n{content}"


def receiver(app, bind):
    """An aiosmtpd Controller (not started) listening on `bind` ("host:port")."""
    host, _, port = bind.rpartition(":")
    logging.getLogger("mail.log").setLevel(logging.WARNING)  # aiosmtpd's own log: sessions, never contents here
    return Controller(CodeMail(app), hostname=host or "127.0.0.1", port=int(port),
                      data_size_limit=MAX_MESSAGE_BYTES, server_hostname="remote-dispatch")
