"""Personal data kept out of storage: PII scrubbing, pseudonyms and anonymization."""
