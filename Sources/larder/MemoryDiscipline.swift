// Keeps the process's resident memory near what Larder holds on purpose (the memory tier, the
// write-behind queue, connection buffers), as docs/architecture.md ("Memory") promises:
// - glibc gives each thread that allocates concurrently its own arena, up to 8 per core, and
//   memory freed into one arena is not reused by another: two arenas serve Larder's few busy
//   threads as well (measured: 19 MiB less after the benchmark's workloads);
// - freed memory in the middle of a heap is not returned to the system; every 10 s the heaps'
//   free pages are given back (malloc_trim), so a burst (a wave of large misses) does not
//   leave its high-water mark behind.

import CMalloc
import Dispatch

#if canImport(Glibc)
    import Glibc
#endif

final class MemoryDiscipline {
    private let timer: DispatchSourceTimer

    init() {
        // An operator's MALLOC_ARENA_MAX (glibc's own variable) wins.
        if getenv("MALLOC_ARENA_MAX") == nil { mallopt(M_ARENA_MAX, 2) }
        let timer = DispatchSource.makeTimerSource(queue: .global(qos: .utility))
        timer.schedule(deadline: .now() + 10, repeating: 10)
        timer.setEventHandler { malloc_trim(0) }
        timer.resume()
        self.timer = timer
    }

    func stop() { timer.cancel() }
}
