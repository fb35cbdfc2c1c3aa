"""Ranking: the tokenizer and the reference lexical ranker."""
