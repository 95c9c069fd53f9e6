"""The doors of ingress, one module each: each turns what arrives through it (an HTTP
request, a batch item, an SMTP transaction, an SES receipt) into one `Submission` for
the acceptance pipeline (`mailqueue.services.ingress.pipeline`), with its own Received:
field, and answers the way its clients expect. A new door is a new module here.
"""
