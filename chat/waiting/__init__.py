"""The wait for a submitted request (chat.waiting.waiter) and the availability refusals it and the submit raise."""
