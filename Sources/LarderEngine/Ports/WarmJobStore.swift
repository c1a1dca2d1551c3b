/// Where warm jobs live, so they survive a restart. Specs are stored sealed (they may carry
/// credentials); the store sees only bytes.
public protocol WarmJobStore: Sendable {
    /// Persists a new job and its sealed specs (index order), then calls back.
    func createJob(_ record: WarmJobRecord, sealedSpecs: [[UInt8]], completion: @escaping @Sendable (Bool) -> Void)
    /// Marks one item finished (`done` or `failed`) and saves the job's counters, in one
    /// transaction, in the order of calls; then calls back.
    func finishItem(_ index: Int, state: String, job: WarmJobRecord, completion: @escaping @Sendable () -> Void)
    /// Saves the job's state and counters, in the order of calls; then calls back with whether
    /// the store took the write (a cancellation that was not saved must not be reported done).
    /// A job that is done or cancelled needs its items' specs no more: they may go.
    func updateJob(_ record: WarmJobRecord, completion: @escaping @Sendable (_ saved: Bool) -> Void)
    /// Removes the jobs and their items (finished jobs past their retention, or deleted), after
    /// every write queued before; then calls back with whether the store took it.
    func deleteJobs(_ ids: [String], completion: @escaping @Sendable (_ saved: Bool) -> Void)
    /// Every job, with the sealed specs of its items not finished yet (index, spec).
    func loadJobs() -> [(record: WarmJobRecord, pending: [(index: Int, sealedSpec: [UInt8])])]
}
