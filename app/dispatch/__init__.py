"""Remote dispatch: submitting tasks and reading their results."""
