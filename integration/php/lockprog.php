<?php
// What the PHP lock programs share: checks, the trace they print, the
// contention and hand-off scenarios, and the run of a scenario. A program
// sets $waitAck (wait for a line on stdin after each step) and, if its
// steps carry more fields, $traceFields, before it emits.

class CheckFailed extends Exception {}

function check(bool $cond, string $msg): void
{
    if (!$cond) {
        throw new CheckFailed($msg);
    }
}

// emit prints one step of the trace and, with --wait-ack, waits until the
// caller has checked the masters.
function emit(string $step, array $fields = []): void
{
    global $waitAck, $traceFields;
    $final = $step === 'done' || $step === 'error';
    if (!$final && $step !== 'contention') {
        $fields += $traceFields ?? [];
    }
    $fields['step'] = $step;
    fwrite(STDOUT, json_encode($fields) . "\n");
    fflush(STDOUT);
    if ($waitAck && !$final && fgets(STDIN) === false) {
        throw new CheckFailed('the checker went away');
    }
}

// contention: forked processes increment a counter in a file, with a
// pause between read and write, $rounds times each; $worker, called once
// in each process, returns how that process runs one increment (under the
// lock, or, for the control run, without). No update may be lost.
function contention(string $name, int $workers, int $rounds, callable $worker): void
{
    $file = tempnam(sys_get_temp_dir(), 'lock-counter-');
    file_put_contents($file, '0');
    $increment = function () use ($file) {
        $v = (int) file_get_contents($file);
        usleep(2000);
        file_put_contents($file, (string) ($v + 1));
    };
    $pids = [];
    for ($w = 0; $w < $workers; $w++) {
        $pid = pcntl_fork();
        check($pid >= 0, 'fork failed');
        if ($pid === 0) {
            $code = 0;
            try {
                $round = $worker();
                for ($r = 0; $r < $rounds; $r++) {
                    $round($increment);
                }
            } catch (Throwable $e) {
                fwrite(STDERR, get_class($e) . ': ' . $e->getMessage() . "\n");
                $code = 1;
            }
            exit($code);
        }
        $pids[] = $pid;
    }
    $failed = 0;
    foreach ($pids as $pid) {
        pcntl_waitpid($pid, $status);
        if (!pcntl_wifexited($status) || pcntl_wexitstatus($status) !== 0) {
            $failed++;
        }
    }
    $counter = (int) file_get_contents($file);
    unlink($file);
    check($failed === 0, "$failed workers failed");
    $want = $workers * $rounds;
    check($counter === $want, sprintf('lost %d of %d updates', $want - $counter, $want));
    emit('contention', ['key' => $name, 'increments' => $want, 'counter' => $counter]);
}

// handoff: while this process holds the lock, a forked one waits for it
// ($wait, in the child: returns once it holds it, with its owner and a
// function that releases it). After half a second this one releases
// ($release); the waiter must get the lock after that and within $within
// seconds. $got is called with the waiter's owner while the waiter still
// holds the lock; then the waiter releases it, and its owner is returned.
function handoff(callable $wait, callable $release, float $within, callable $got): string
{
    $dir = sys_get_temp_dir() . '/lock-handoff-' . getmypid() . '-' . bin2hex(random_bytes(4));
    mkdir($dir);
    $pid = pcntl_fork();
    check($pid >= 0, 'fork failed');
    if ($pid === 0) {
        $code = 1;
        try {
            [$owner, $free] = $wait();
            file_put_contents("$dir/got.tmp", json_encode(['at' => microtime(true), 'owner' => $owner]));
            rename("$dir/got.tmp", "$dir/got");
            for ($i = 0; $i < 3000 && !file_exists("$dir/release"); $i++) {
                usleep(10000);
            }
            $code = $free() ? 0 : 2;
        } catch (Throwable $e) {
            file_put_contents("$dir/error", get_class($e) . ': ' . $e->getMessage());
        }
        exit($code);
    }
    try {
        usleep(500000);
        check(!file_exists("$dir/got") && !file_exists("$dir/error"), 'the waiter did not block while the lock was held');
        $releasedAt = microtime(true);
        $release();
        $deadline = microtime(true) + 10;
        while (!file_exists("$dir/got") && !file_exists("$dir/error")) {
            check(microtime(true) < $deadline, 'the waiter did not get the lock within 10s of its release');
            usleep(10000);
        }
        check(!file_exists("$dir/error"), 'waiter: ' . @file_get_contents("$dir/error"));
        $w = json_decode(file_get_contents("$dir/got"), true);
        check($w['at'] >= $releasedAt, 'the waiter got the lock before it was released');
        check($w['at'] - $releasedAt < $within, sprintf('the waiter got the lock %.2fs after the release', $w['at'] - $releasedAt));
        $got($w['owner']);
    } finally {
        touch("$dir/release");
        pcntl_waitpid($pid, $status);
    }
    check(pcntl_wifexited($status) && pcntl_wexitstatus($status) === 0, 'the waiter failed to release: ' . @file_get_contents("$dir/error"));
    return $w['owner'];
}

// runScenario runs a program's scenario and ends the trace: "done", or
// "error" with what failed (and exit status 1).
function runScenario(callable $scenario): void
{
    try {
        $scenario();
    } catch (Throwable $e) {
        fwrite(STDERR, (string) $e . "\n");
        emit('error', ['error' => get_class($e) . ': ' . $e->getMessage()]);
        exit(1);
    }
    emit('done');
}
