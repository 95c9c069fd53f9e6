#!/usr/bin/perl
# Sisimai's verdict on each message file named on the command line: one JSON line per
# bounced recipient (file, recipient, reason, softbounce, status, feedback type).
# Sisimai->rise (5.x) or Sisimai->make (4.x, Debian bookworm's libsisimai-perl).
use strict;
use warnings;
use Sisimai;
use JSON::PP;

my $json = JSON::PP->new->canonical(1);
my $call = Sisimai->can('rise') ? 'rise' : 'make';
print $json->encode({ 'sisimai' => "$Sisimai::VERSION", 'call' => $call }), "\n";
for my $file (@ARGV) {
    my $list = eval { Sisimai->$call($file, 'delivered' => 1, 'vacation' => 1) } || [];
    for my $d (@$list) {
        print $json->encode({
            'file'       => $file,
            'recipient'  => $d->recipient->address,
            'reason'     => $d->reason,
            'softbounce' => int($d->softbounce),
            'status'     => $d->deliverystatus,
            'feedback'   => $d->feedbacktype,
            'action'     => $d->action,
        }), "\n";
    }
}
