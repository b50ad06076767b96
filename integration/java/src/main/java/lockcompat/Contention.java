package lockcompat;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Workers that each increment a shared counter inside a lock, with a pause
 * between the read and the write: a lock that lets two holders in loses
 * updates and is seen overlapping.
 */
final class Contention {
    /** Runs body while holding the lock; worker is the caller's index. */
    interface WithLock {
        void run(int worker, Runnable body) throws Exception;
    }

    private volatile int counter;
    private final AtomicInteger inside = new AtomicInteger();
    private final AtomicInteger overlaps = new AtomicInteger();

    private void increment() {
        if (inside.incrementAndGet() > 1) {
            overlaps.incrementAndGet();
        }
        int v = counter;
        Main.sleep(2);
        counter = v + 1;
        inside.decrementAndGet();
    }

    /** Runs workers x rounds increments and returns "lost N, overlapped M". */
    static int[] run(int workers, int rounds, WithLock lock) throws Exception {
        Contention c = new Contention();
        List<Thread> threads = new ArrayList<>();
        List<Throwable> errors = new ArrayList<>();
        for (int w = 0; w < workers; w++) {
            int worker = w;
            Thread t = new Thread(() -> {
                try {
                    for (int r = 0; r < rounds; r++) {
                        lock.run(worker, c::increment);
                    }
                } catch (Throwable e) {
                    synchronized (errors) {
                        errors.add(e);
                    }
                }
            });
            threads.add(t);
            t.start();
        }
        for (Thread t : threads) {
            t.join();
        }
        if (!errors.isEmpty()) {
            throw new AssertionError("a worker failed: " + Main.describe(errors.get(0)), errors.get(0));
        }
        synchronized (c) {
            return new int[] {workers * rounds - c.counter, c.overlaps.get()};
        }
    }

    /** Fails unless the workers lost no update and never overlapped. */
    static void assertExclusive(int workers, int rounds, WithLock lock) throws Exception {
        int[] r = run(workers, rounds, lock);
        Main.check(r[0] == 0 && r[1] == 0, r[0] + " updates lost, " + r[1] + " entries overlapped another holder");
    }

    /** Fails unless the same workers without a lock lose updates: the check can fail. */
    static void assertControlLoses() throws Exception {
        int[] r = run(8, 20, (w, body) -> body.run());
        Main.check(r[0] > 0 && r[1] > 0, "without a lock no update was lost: the contention check sees nothing");
    }

    private Contention() {
    }
}
