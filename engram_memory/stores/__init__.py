"""Reference Store implementations (in-memory, SQLite)."""
