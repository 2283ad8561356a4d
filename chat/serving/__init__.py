"""The one path every API shares: the Horde route choice, the submit, the wait and its outcome, and the request
record.
"""
