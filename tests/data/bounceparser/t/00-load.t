#!perl -wT
use strict;

use Test::More tests => 1;

use Mail::DeliveryStatus::BounceParser;
ok(1);

