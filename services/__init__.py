"""The six Attest roles, one package each."""
