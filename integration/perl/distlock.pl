#!/usr/bin/perl
# Redis::DistLock's call sequence, replayed with the Redis module (Debian's
# libredis-perl), against one Redis address (a lone Redis, or
# redlock-proxy in front of several masters). The module is not packaged
# where the tests run, so its commands are sent as it sends them: INFO (its
# check of redis_version), SCRIPT LOAD of its release script (whose reply
# must be the script's SHA1), SET key value NX PX ttl with a random base64
# value, and EVALSHA of the release script. The script is this project's,
# of the same behaviour.
#
# Trace and acknowledgements as in integration/php/lockprog.php: one JSON
# line per step, then a line on stdin with --wait-ack; the last line is
# {"step":"done"} or {"step":"error",...}.
#
#   perl distlock.pl --addr 127.0.0.1:6379 --scenario lifecycle

use strict;
use warnings;

use Digest::SHA qw(sha1_hex);
use Getopt::Long;
use JSON::PP;
use MIME::Base64 qw(encode_base64);
use Redis;

my $RELEASE = "local v = redis.call('GET', KEYS[1])\nif v and v == ARGV[1] then return redis.call('DEL', KEYS[1]) end\nreturn 0\n";

my ( $addr, $scenario, $prefix, $wait_ack ) = ( '', '', 'distlock', 0 );
GetOptions( 'addr=s' => \$addr, 'scenario=s' => \$scenario, 'prefix=s' => \$prefix, 'wait-ack' => \$wait_ack )
    or die "bad arguments\n";

my $json = JSON::PP->new->canonical;
$| = 1;

sub emit {
    my ( $step, %fields ) = @_;
    $fields{step} = $step;
    print $json->encode( \%fields ), "\n";
    return if $step eq 'done' || $step eq 'error' || !$wait_ack;
    defined( scalar <STDIN> ) or die "the checker went away\n";
}

sub check {
    my ( $cond, $msg ) = @_;
    die "$msg\n" unless $cond;
}

sub random_value { encode_base64( join( '', map { chr( int( rand(256) ) ) } 1 .. 24 ), '' ) }

sub lifecycle {
    my ( $redis, $key ) = @_;
    my $info = $redis->info();
    check( ( $info->{redis_version} // '' ) =~ /\A(\d+)\.(\d+)\.(\d+)\z/ && $1 >= 7,
        'INFO has no redis_version of the form 7.x.y: ' . ( $info->{redis_version} // 'none' ) );
    my $sha = $redis->script_load($RELEASE);
    check( $sha eq sha1_hex($RELEASE), "SCRIPT LOAD answered $sha, not the script's SHA1" );

    my $mine = random_value();
    check( ( $redis->set( $key, $mine, 'NX', 'PX', 10000 ) // '' ) eq 'OK', 'SET NX PX of a free key did not answer OK' );
    emit( 'acquire', key => $key, token => $mine, ttl_ms => 10000 );
    my $theirs = random_value();
    check( !defined( $redis->set( $key, $theirs, 'NX', 'PX', 10000 ) ), 'SET NX PX of a held key did not answer nil' );
    emit( 'refused', key => $key, token => $theirs, holder => $mine, ttl_ms => 10000, age_ms => 1000 );
    check( $redis->evalsha( $sha, 1, $key, $theirs ) == 0, 'release with another value did not answer 0' );
    emit( 'not-owner', key => $key, token => $mine, other => $theirs, ttl_ms => 10000, age_ms => 1000 );
    check( $redis->evalsha( $sha, 1, $key, $mine ) == 1, 'release by the holder did not answer 1' );
    emit( 'release', key => $key, token => $mine );
    check( $redis->evalsha( $sha, 1, $key, $mine ) == 0, 'a second release did not answer 0' );
}

my $ok = eval {
    my $redis = Redis->new( server => $addr, reconnect => 0, read_timeout => 10 );
    my $key = "$prefix:$scenario:" . sprintf( '%08x', int( rand( 2**32 ) ) );
    if ( $scenario eq 'lifecycle' ) { lifecycle( $redis, $key ) }
    else                            { die "unknown scenario '$scenario'\n" }
    1;
};
if ( !$ok ) {
    my $err = $@;
    chomp $err;
    print STDERR "$err\n";
    emit( 'error', error => $err );
    exit 1;
}
emit('done');
