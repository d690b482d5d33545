"""Helpers shared by test packages (fakes of external servers, builders). Not tests themselves."""
