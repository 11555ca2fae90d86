"""The project's tools: each one the body of an `invoke` task."""
