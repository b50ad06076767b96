# redlock-rb's call sequence, replayed with ruby-redis (Debian's
# ruby-redis), against one Redis address (a lone Redis, or redlock-proxy in
# front of several masters). The gem is not packaged where the tests run,
# so its commands are sent as it sends them, in its argument layout: a lock
# script taking the value, the TTL in ms and "yes" (a new lock may be
# taken) or "no" (extend only), run by EVALSHA with its SHA1 computed
# locally, and on NOSCRIPT both scripts loaded then EVALSHA again; a
# release script by EVALSHA; EXISTS then GET to ask who holds it. The
# scripts are this project's, of the same behaviour.
#
# Trace and acknowledgements as in integration/php/lockprog.php: one JSON
# line per step, then a line on stdin with --wait-ack; the last line is
# {"step":"done"} or {"step":"error",...}.
#
#   ruby redlock_rb.rb --addr 127.0.0.1:6379 --scenario lifecycle

require 'digest'
require 'json'
require 'optparse'
require 'redis'
require 'securerandom'

LOCK = <<~LUA
  local held = redis.call('GET', KEYS[1])
  if (held == false and ARGV[3] == 'yes') or held == ARGV[1] then
    return redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  end
  return nil
LUA
RELEASE = <<~LUA
  if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
  return redis.call('DEL', KEYS[1])
LUA

class CheckFailed < StandardError; end

def check(cond, msg)
  raise CheckFailed, msg unless cond
end

opts = { prefix: 'redlock-rb' }
OptionParser.new do |o|
  o.on('--addr ADDR') { |v| opts[:addr] = v }
  o.on('--scenario NAME') { |v| opts[:scenario] = v }
  o.on('--prefix P') { |v| opts[:prefix] = v }
  o.on('--wait-ack') { opts[:wait_ack] = true }
end.parse!

$wait_ack = opts[:wait_ack]
def emit(step, fields = {})
  $stdout.puts(JSON.generate(fields.merge(step: step)))
  $stdout.flush
  return if %w[done error].include?(step) || !$wait_ack
  raise CheckFailed, 'the checker went away' if $stdin.gets.nil?
end

# Instance is one server as the gem sees it.
class Instance
  attr_reader :loads

  def initialize(redis)
    @redis = redis
    @loads = 0
    @lock_sha = Digest::SHA1.hexdigest(LOCK)
    @release_sha = Digest::SHA1.hexdigest(RELEASE)
  end

  def lock(key, value, ttl, allow_new)
    noscript { @redis.evalsha(@lock_sha, keys: [key], argv: [value, ttl, allow_new]) }
  end

  def unlock(key, value)
    noscript { @redis.evalsha(@release_sha, keys: [key], argv: [value]) }
  end

  def exists?(key, value = nil)
    return false unless @redis.exists?(key)
    value.nil? || @redis.get(key) == value
  end

  private

  def noscript
    yield
  rescue Redis::CommandError => e
    raise unless e.message.include?('NOSCRIPT')
    @loads += 1
    check(@redis.script(:load, LOCK) == @lock_sha && @redis.script(:load, RELEASE) == @release_sha,
          'SCRIPT LOAD answered another SHA1')
    yield
  end
end

def lifecycle(s, key)
  mine = SecureRandom.uuid
  check(s.lock(key, mine, 10_000, 'yes') == 'OK', 'lock of a free resource did not answer OK')
  check(s.loads == 1, "the scripts were loaded #{s.loads} times; want once, on the first NOSCRIPT")
  emit('acquire', key: key, token: mine, ttl_ms: 10_000)
  theirs = SecureRandom.uuid
  check(s.lock(key, theirs, 10_000, 'yes').nil?, 'lock of a held resource did not answer nil')
  check(s.exists?(key) && s.exists?(key, mine) && !s.exists?(key, theirs), 'locked?/owner? disagree with the holder')
  emit('refused', key: key, token: theirs, holder: mine, ttl_ms: 10_000, age_ms: 1000)
  check(s.lock(key, mine, 20_000, 'no') == 'OK', 'extend (extend_only_if_life) by the holder did not answer OK')
  emit('extend', key: key, token: mine, ttl_ms: 20_000)
  check(s.unlock(key, theirs) == 0, 'unlock with another value did not answer 0')
  emit('not-owner', key: key, token: mine, other: theirs, ttl_ms: 20_000, age_ms: 1000)
  check(s.unlock(key, mine) == 1, 'unlock by the holder did not answer 1')
  emit('release', key: key, token: mine)
  check(s.lock(key, mine, 10_000, 'no').nil?, 'extend_only_if_life of a released lock took it')
  check(!s.exists?(key), 'locked? after unlock')
  emit('release', key: key, token: mine)
end

begin
  host, port = opts[:addr].to_s.split(':')
  redis = Redis.new(host: host, port: port.to_i, timeout: 10)
  key = "#{opts[:prefix]}:#{opts[:scenario]}:#{SecureRandom.hex(8)}"
  case opts[:scenario]
  when 'lifecycle' then lifecycle(Instance.new(redis), key)
  else raise CheckFailed, "unknown scenario '#{opts[:scenario]}'"
  end
rescue StandardError => e
  warn e.full_message
  emit('error', error: "#{e.class}: #{e.message}")
  exit 1
end
emit('done')
