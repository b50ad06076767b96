// redlock-cpp's call sequence, replayed with hiredis (Debian's
// libhiredis-dev), against one Redis address (a lone Redis, or
// redlock-proxy in front of several masters). The library is in no
// registry, so its commands are sent as it sends them: "set %s %s px %d
// nx" with a 40-hex-digit value from /dev/urandom, EVAL of a release
// script, and ContinueLock's EVAL taking the old value, a new value and
// the TTL (the lock passes to the new value). The scripts are this
// project's, of the same behaviour.
//
// Trace and acknowledgements as in integration/php/lockprog.php: one JSON
// line per step, then a line on stdin with --wait-ack; the last line is
// {"step":"done"} or {"step":"error",...}.
//
//   g++ -o redlock_cpp redlock_cpp.cpp -lhiredis
//   ./redlock_cpp --addr 127.0.0.1:6379 --scenario lifecycle

#include <hiredis/hiredis.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

const char *kRelease =
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
    "return redis.call('DEL', KEYS[1])";
const char *kContinue =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end\n"
    "return redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3], 'NX')";

struct CheckFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check(bool cond, const std::string &msg) {
  if (!cond) throw CheckFailed(msg);
}

bool waitAck = false;

std::string quote(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

void emit(const std::string &step, const std::vector<std::pair<std::string, std::string>> &fields) {
  std::string line = "{";
  for (const auto &f : fields) line += quote(f.first) + ": " + f.second + ", ";
  line += "\"step\": " + quote(step) + "}";
  std::cout << line << std::endl;
  if (!waitAck || step == "done" || step == "error") return;
  std::string ack;
  if (!std::getline(std::cin, ack)) throw CheckFailed("the checker went away");
}

using Reply = std::unique_ptr<redisReply, void (*)(void *)>;

Reply command(redisContext *c, const std::vector<std::string> &args) {
  std::vector<const char *> argv;
  std::vector<size_t> lens;
  for (const auto &a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  auto *r = static_cast<redisReply *>(redisCommandArgv(c, int(args.size()), argv.data(), lens.data()));
  if (r == nullptr) throw std::runtime_error(std::string("redis: ") + c->errstr);
  return Reply(r, freeReplyObject);
}

// lockInstance is the library's SET, written as a format string.
bool lockInstance(redisContext *c, const std::string &key, const std::string &val, int ttl) {
  auto *r = static_cast<redisReply *>(redisCommand(c, "set %s %s px %d nx", key.c_str(), val.c_str(), ttl));
  if (r == nullptr) throw std::runtime_error(std::string("redis: ") + c->errstr);
  Reply reply(r, freeReplyObject);
  check(reply->type != REDIS_REPLY_ERROR, std::string("SET answered ") + (reply->str ? reply->str : ""));
  return reply->str != nullptr && std::string(reply->str) == "OK";
}

long long unlockInstance(redisContext *c, const std::string &key, const std::string &val) {
  auto r = command(c, {"EVAL", kRelease, "1", key, val});
  check(r->type == REDIS_REPLY_INTEGER, std::string("release answered ") + (r->str ? r->str : "a non-integer"));
  return r->integer;
}

bool continueInstance(redisContext *c, const std::string &key, const std::string &old, const std::string &val, int ttl) {
  auto r = command(c, {"EVAL", kContinue, "1", key, old, val, std::to_string(ttl)});
  check(r->type != REDIS_REPLY_ERROR, std::string("ContinueLock answered ") + (r->str ? r->str : ""));
  return r->str != nullptr && std::string(r->str) == "OK";
}

std::string uniqueId() {
  std::ifstream f("/dev/urandom", std::ios::binary);
  unsigned char b[20];
  check(bool(f.read(reinterpret_cast<char *>(b), sizeof b)), "cannot read /dev/urandom");
  std::string s;
  char hex[3];
  for (unsigned char x : b) {
    std::snprintf(hex, sizeof hex, "%02X", x);
    s += hex;
  }
  return s;
}

void lifecycle(redisContext *c, const std::string &key) {
  const std::string mine = uniqueId();
  check(lockInstance(c, key, mine, 10000), "set px nx of a free key failed");
  emit("acquire", {{"key", quote(key)}, {"token", quote(mine)}, {"ttl_ms", "10000"}});
  const std::string theirs = uniqueId();
  check(!lockInstance(c, key, theirs, 10000), "set px nx of a held key succeeded");
  emit("refused", {{"key", quote(key)}, {"token", quote(theirs)}, {"holder", quote(mine)}, {"ttl_ms", "10000"}, {"age_ms", "1000"}});
  check(unlockInstance(c, key, theirs) == 0, "release with another value did not answer 0");
  emit("not-owner", {{"key", quote(key)}, {"token", quote(mine)}, {"other", quote(theirs)}, {"ttl_ms", "10000"}, {"age_ms", "1000"}});

  check(unlockInstance(c, key, mine) == 1, "release by the holder did not answer 1");
  emit("release", {{"key", quote(key)}, {"token", quote(mine)}});
  check(unlockInstance(c, key, mine) == 0, "a second release did not answer 0");
}

// continueLock: ContinueLock hands the holder's lock to a new value. One
// Redis does it (handoff); where it is refused instead (nil), the old
// value must still hold the lock, untouched (refused). Either way a
// ContinueLock with a value that no longer holds it takes nothing.
void continueLock(redisContext *c, const std::string &key) {
  const std::string mine = uniqueId();
  check(lockInstance(c, key, mine, 10000), "set px nx of a free key failed");
  emit("acquire", {{"key", quote(key)}, {"token", quote(mine)}, {"ttl_ms", "10000"}});
  std::string holder = mine;
  const std::string next = uniqueId();
  if (continueInstance(c, key, mine, next, 20000)) {
    holder = next;
    emit("handoff", {{"key", quote(key)}, {"token", quote(next)}, {"other", quote(mine)}, {"ttl_ms", "20000"}});
  } else {
    emit("refused", {{"key", quote(key)}, {"token", quote(next)}, {"holder", quote(mine)}, {"ttl_ms", "10000"}, {"age_ms", "1000"}});
  }
  const std::string stale = uniqueId();
  const std::string old = holder == mine ? uniqueId() : mine;
  check(!continueInstance(c, key, old, stale, 20000), "ContinueLock with a value that does not hold the lock took it");
  emit("refused", {{"key", quote(key)}, {"token", quote(stale)}, {"holder", quote(holder)}, {"ttl_ms", holder == mine ? "10000" : "20000"}, {"age_ms", "1000"}});
  check(unlockInstance(c, key, holder) == 1, "release by the holder did not answer 1");
  emit("release", {{"key", quote(key)}, {"token", quote(holder)}});
}
}  // namespace

int main(int argc, char **argv) {
  std::map<std::string, std::string> opt = {{"--prefix", "redlock-cpp"}};
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--wait-ack") {
      waitAck = true;
    } else if (i + 1 < argc) {
      opt[a] = argv[++i];
    }
  }
  try {
    const std::string addr = opt["--addr"];
    const auto colon = addr.rfind(':');
    check(colon != std::string::npos, "--addr host:port is required");
    struct timeval timeout = {10, 0};
    redisContext *c = redisConnectWithTimeout(addr.substr(0, colon).c_str(), std::stoi(addr.substr(colon + 1)), timeout);
    check(c != nullptr && c->err == 0, std::string("cannot connect: ") + (c ? c->errstr : "out of memory"));
    redisSetTimeout(c, timeout);
    const std::string key = opt["--prefix"] + ":" + opt["--scenario"] + ":" + uniqueId().substr(0, 16);
    if (opt["--scenario"] == "lifecycle") {
      lifecycle(c, key);
    } else if (opt["--scenario"] == "continue") {
      continueLock(c, key);
    } else {
      throw CheckFailed("unknown scenario '" + opt["--scenario"] + "'");
    }
    redisFree(c);
  } catch (const std::exception &e) {
    std::cerr << e.what() << std::endl;
    emit("error", {{"error", quote(e.what())}});
    return 1;
  }
  emit("done", {});
  return 0;
}
