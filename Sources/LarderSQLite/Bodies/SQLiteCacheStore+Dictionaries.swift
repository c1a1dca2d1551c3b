// The compression dictionaries (BodyDictionaries) kept in the database beside the entries they
// compressed, so those read back after a restart. A handful of rows of at most 32 KiB; not
// counted against capacity.

import LarderCore
public import LarderEngine

extension SQLiteCacheStore: DictionaryStore {
    public func loadDictionaries() -> [BodyDictionary] {
        readDictionaries(where: "")
    }

    public func loadDictionary(id: UInt32) -> BodyDictionary? {
        readDictionaries(where: "WHERE id = \(id)").first
    }

    private func readDictionaries(where condition: String) -> [BodyDictionary] {
        writerQueue.sync { [self] in
            do {
                let select = try writer.prepare("SELECT id, namespace, trained_at, content FROM body_dictionaries \(condition)")
                defer { select.reset() }
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
                return dictionaries
            } catch {
                logger.error("cannot read compression dictionaries", metadata: ["error": "\(error)"])
                return []
            }
        }
    }

    public func saveDictionary(_ dictionary: BodyDictionary, retiring: [UInt32]) -> Bool {
        writerQueue.sync { [self] in
            guard !closed.load(ordering: .relaxed) else { return false }
            do {
                var inserted = false
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
                    inserted = writer.changes == 1
                    let delete = try writer.prepare("DELETE FROM body_dictionaries WHERE id = ?1")
                    for id in retiring {
                        try delete.bind(1, Int64(id))
                        _ = try delete.step()
                        delete.reset()
                    }
                }
                return inserted
            } catch {
                logger.error("cannot keep a compression dictionary", metadata: ["error": "\(error)"])
                return false
            }
        }
    }
}
