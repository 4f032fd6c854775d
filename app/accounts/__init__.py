"""What the SDK reaches through outside accounts (Agent Studio vector stores, Google Drive): not offered here."""
