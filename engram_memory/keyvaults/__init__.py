"""Reference KeyVault implementations (in-memory, SQLite-backed)."""
