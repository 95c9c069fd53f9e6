"""The services the Lambda handlers call: ingress, delivery, bounce, sweeper, the event
writer and the admin service. They stand on core's protocols and ports and on outbound;
they never name a backend (the composition roots in `mailqueue.compose` do)."""
