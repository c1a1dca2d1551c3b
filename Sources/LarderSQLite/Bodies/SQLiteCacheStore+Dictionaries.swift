// The compression dictionaries (BodyDictionaries) kept in the database beside the entries they
// compressed, so those read back after a restart. A handful of rows of at most 32 KiB; not
// counted against capacity.

import LarderCore
public import LarderEngine

extension SQLiteCacheStore: DictionaryStore {
    public func loadDictionaries() -> [BodyDictionary] {
        do {
            return try readDictionaries("", namespace: nil)
        } catch {
            logger.error("cannot read compression dictionaries", metadata: ["error": "\(error)"])
            return []
        }
    }

    public func loadDictionary(id: UInt32) throws -> BodyDictionary? {
        try readDictionaries("WHERE id = \(id)", namespace: nil).first
    }

    public func newestDictionary(of namespace: String) throws -> BodyDictionary? {
        try readDictionaries("WHERE namespace = ?1 ORDER BY trained_at DESC LIMIT 1", namespace: namespace).first
    }

    /// The rows `condition` selects (`?1` bound to `namespace`).
    private func readDictionaries(_ condition: String, namespace: String?) throws -> [BodyDictionary] {
        let read = writerQueue.sync { [self] () -> Result<[BodyDictionary], any Error> in
            do {
                let select = try writer.prepare("SELECT id, namespace, trained_at, content FROM body_dictionaries \(condition)")
                defer { select.reset() }
                if let namespace { try select.bind(1, namespace) }
                var dictionaries: [BodyDictionary] = []
                while try select.step() {
                    let id = select.int64(0)
                    // As any row read: used only when it is one Larder could have written.
                    guard let namespace = select.string(1),
                        Int64(DictionaryTraining.ids.lowerBound)...Int64(DictionaryTraining.ids.upperBound) ~= id
                    else { continue }
                    dictionaries.append(
                        BodyDictionary(id: UInt32(id), namespace: namespace, trainedAt: select.double(2), bytes: select.bytes(3)))
                }
                return .success(dictionaries)
            } catch {
                return .failure(error)
            }
        }
        return try read.get()
    }

    public func saveDictionary(_ dictionary: BodyDictionary, keepingNewest: Int) -> [UInt32]? {
        writerQueue.sync { [self] () -> [UInt32]? in
            guard !closed.load(ordering: .relaxed) else { return nil }
            do {
                var retired: [UInt32]?
                try writer.immediateTransaction { () throws(SQLiteError) in
                    let insert = try writer.prepare(
                        """
                        INSERT INTO body_dictionaries (id, namespace, trained_at, content) VALUES (?1, ?2, ?3, ?4)
                        ON CONFLICT (id) DO NOTHING
                        """)
                    try insert.bind(1, Int64(dictionary.id))
                    try insert.bind(2, dictionary.namespace)
                    try insert.bind(3, dictionary.trainedAt)
                    try insert.bind(4, dictionary.bytes)
                    _ = try insert.step()
                    guard writer.changes == 1 else { return }
                    let retire = try writer.prepare(
                        """
                        DELETE FROM body_dictionaries WHERE namespace = ?1 AND id NOT IN
                          (SELECT id FROM body_dictionaries WHERE namespace = ?1 ORDER BY trained_at DESC LIMIT ?2)
                        RETURNING id
                        """)
                    try retire.bind(1, dictionary.namespace)
                    try retire.bind(2, Int64(keepingNewest))
                    var removed: [UInt32] = []
                    while try retire.step() { removed.append(UInt32(truncatingIfNeeded: retire.int64(0))) }
                    retire.reset()
                    retired = removed
                }
                return retired
            } catch {
                logger.error("cannot keep a compression dictionary", metadata: ["error": "\(error)"])
                return nil
            }
        }
    }
}
