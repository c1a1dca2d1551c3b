// Compression dictionaries (DictionaryTraining, BodyDictionaries, ZstdCodec): a namespace's
// dictionary is trained from its own bodies once enough are stored, later bodies are stored
// with it and smaller, every stored frame names its dictionary so an entry compressed with an
// older one still reads after a newer one and after a restart, another instance's dictionary is
// loaded from the store when a frame names it, and a frame whose dictionary is gone is a miss.

import Foundation
import LarderCore
import LarderEngine
import LarderTesting
import LarderZstd
import Logging
import XCTest

final class DictionaryTests: SemanticsTestCase {
    private let samples = 12

    override func setUp() {
        super.setUp()
        bodyCodec = ZstdCodec()
    }

    private var limits: FetchEngine.Limits {
        var limits = FetchEngine.Limits()
        limits.dictionaries = DictionaryTraining(samples: samples)
        return limits
    }

    private func spec(_ path: String, namespace: String = "api", size: Int = 2000) -> [String: Any] {
        ["url": url(path, "records=\(size)&cc=max-age%3D600"), "cache": ["namespace": namespace]]
    }

    /// The row the answer's key names.
    private func storedRow(_ answer: TestResponse) throws -> StoredEntry {
        try XCTUnwrap(store.lookup(CacheKey(hex: try XCTUnwrap(answer.cache["key"] as? String))).first)
    }

    /// Stores `samples` bodies in `namespace` and waits for the dictionary they train.
    private func trainDictionary(_ namespace: String = "api", file: StaticString = #filePath, line: UInt = #line) throws -> UInt32 {
        let before = engine.dictionaries?.figures()[namespace]?.id
        for index in 0..<samples {
            XCTAssertEqual(fetch(spec(uniquePath() + "-\(index)", namespace: namespace)).outcome, "miss", file: file, line: line)
        }
        engine.dictionaries?.awaitTrainings()
        let id = try XCTUnwrap(engine.dictionaries?.figures()[namespace]?.id, file: file, line: line)
        XCTAssertNotEqual(id, before, file: file, line: line)
        return id
    }

    func testANamespaceTrainsADictionaryFromItsBodiesAndStoresLaterOnesWithIt() throws {
        try onEachStore {
            restartEngine(limits: limits)
            let id = try trainDictionary()
            XCTAssertTrue(DictionaryTraining.ids.contains(id))
            let path = uniquePath()
            let miss = fetch(spec(path))
            let row = try storedRow(miss)
            XCTAssertEqual(row.bodyCoding, .zstd)
            XCTAssertEqual(bodyCodec?.dictionaryID(of: row.body), id, "the frame names its dictionary")
            let body = OriginScript.records(path: path, size: 2000)
            let alone = try XCTUnwrap(bodyCodec?.compress(body))
            XCTAssertLessThan(row.body.count, alone.count * 9 / 10, "\(row.body.count) with the dictionary, \(alone.count) without")
            let hit = fetch(spec(path))
            XCTAssertEqual(hit.outcome, "hit")
            XCTAssertEqual(try JSONSerialization.jsonObject(with: Data(body)) as? NSDictionary, hit.json["body"] as? NSDictionary)
            XCTAssertEqual(origin.count(path), 1)
            // Another namespace has none of it.
            let other = fetch(spec(uniquePath(), namespace: "other"))
            XCTAssertNil(bodyCodec?.dictionaryID(of: try storedRow(other).body))
            XCTAssertEqual(engine.compressionFigures.dictionaries, 1)
        }
    }

    func testAnEntryCompressedWithAnOlderDictionaryReadsAfterANewOneAndAfterARestart() throws {
        try onEachStore(persistent: true) {
            restartEngine(limits: limits)
            let first = try trainDictionary()
            let old = uniquePath()
            XCTAssertEqual(bodyCodec?.dictionaryID(of: try storedRow(fetch(spec(old))).body), first)
            // An operator asks for a new one (at the same instant, as the clock stands still):
            // trained from the next full sample set, and the newer however close in time.
            XCTAssertEqual(engine.requestDictionary(for: "api"), .sampling(samples: 0, needed: samples))
            let second = try trainDictionary()
            let new = uniquePath()
            XCTAssertEqual(bodyCodec?.dictionaryID(of: try storedRow(fetch(spec(new))).body), second)
            XCTAssertEqual(engine.dictionaries?.figures()["api"]?.versions, 2)
            for path in [old, new] {
                XCTAssertEqual(fetch(spec(path)).outcome, "hit", path)
            }
            // A new process: a codec that has seen neither, the store's dictionaries loaded.
            bodyCodec = ZstdCodec()
            try reopenStore(limits: limits)
            XCTAssertEqual(engine.dictionaries?.figures()["api"]?.id, second, "the newest compresses")
            for path in [old, new] {
                let hit = fetch(spec(path))
                XCTAssertEqual(hit.outcome, "hit", path)
                let body = try JSONSerialization.jsonObject(with: Data(OriginScript.records(path: path, size: 2000)))
                XCTAssertEqual(hit.json["body"] as? NSDictionary, body as? NSDictionary)
                XCTAssertEqual(origin.count(path), 1)
            }
        }
    }

    func testAFrameNamingAnotherInstancesDictionaryLoadsItFromTheStore() throws {
        try onEachStore {
            // Two instances over one store: each its own codec, the same dictionaries kept.
            let reader = FetchEngine(
                store: store, upstream: origin, keys: keys, clock: clock.clock, limits: limits, bodyCodec: ZstdCodec(),
                dictionaryStore: dictionaryStore, logger: Logger(label: "engine-test"))
            restartEngine(limits: limits)
            let id = try trainDictionary()
            let path = uniquePath()
            XCTAssertEqual(bodyCodec?.dictionaryID(of: try storedRow(fetch(spec(path))).body), id)
            XCTAssertNil(reader.dictionaries?.figures()["api"], "trained after the reader started")
            let request = try FetchRequest.parse(json: Array(try JSONSerialization.data(withJSONObject: spec(path))))
            guard case .answered(let answer) = reader.lookup(reader.prepare(request)) else {
                return XCTFail("the reader did not answer from the store")
            }
            guard case .served(let served) = answer else { return XCTFail("\(answer)") }
            XCTAssertEqual(served.report.outcome, .hit)
            XCTAssertEqual(origin.count(path), 1)
        }
    }

    func testAnInstanceTakesAnotherInstancesFreshDictionaryInsteadOfTrainingItsOwn() throws {
        try onEachStore {
            // Two instances over one store, each with its own codec; the second starts first.
            bodyCodec = ZstdCodec()
            restartEngine(limits: limits)
            let second = engine!
            bodyCodec = ZstdCodec()
            restartEngine(limits: limits)
            let id = try trainDictionary()
            engine = second
            XCTAssertNil(engine.dictionaries?.figures()["api"]?.id)
            XCTAssertEqual(try trainDictionary(), id, "the first instance's, taken when the second's sample set was full")
            XCTAssertEqual(dictionaryStore?.loadDictionaries().count, 1)
            XCTAssertEqual(engine.compressionFigures.dictionaries, 0, "it trained none of its own")
            let path = uniquePath()
            XCTAssertEqual(bodyCodec?.dictionaryID(of: try storedRow(fetch(spec(path))).body), id, "stored with the one it took")
            XCTAssertEqual(fetch(spec(path)).outcome, "hit")
        }
    }

    func testAFrameWhoseDictionaryIsGoneIsAMissNeverServedAndIsLookedForAgainLater() throws {
        try onEachStore {
            restartEngine(limits: limits)
            let id = try trainDictionary()
            let path = uniquePath()
            XCTAssertEqual(fetch(spec(path)).outcome, "miss")
            // A codec that never saw the dictionary, and a store that does not have it.
            let lost = MemoryDictionaryStore()
            let stranger = FetchEngine(
                store: store, upstream: origin, keys: keys, clock: clock.clock, limits: limits, bodyCodec: ZstdCodec(),
                dictionaryStore: lost, logger: Logger(label: "engine-test"))
            let request = try FetchRequest.parse(json: Array(try JSONSerialization.data(withJSONObject: spec(path))))
            guard case .miss = stranger.lookup(stranger.prepare(request)) else {
                return XCTFail("a body that cannot be read answered")
            }
            // The dictionary comes back (put back in Redis): not asked for on every read, but
            // found again a minute later.
            let dictionary = try XCTUnwrap(dictionaryStore?.loadDictionary(id: id))
            XCTAssertEqual(lost.saveDictionary(dictionary, keepingNewest: DictionaryTraining.keptVersions), [])
            guard case .miss = stranger.lookup(stranger.prepare(request)) else { return XCTFail("asked for again at once") }
            clock.advance(by: 61)
            guard case .answered = stranger.lookup(stranger.prepare(request)) else { return XCTFail("not found again") }
        }
    }

    func testWhenManyNamespacesSampleAtOnceTheLargestSetTrainsToMakeRoom() throws {
        try onEachStore {
            restartEngine(limits: FetchEngine.Limits())
            // Twelve namespaces, 60 KB bodies in turn: 32 MiB of samples before any set of 1,000.
            let namespaces = (0..<12).map { "ns\($0)" }
            for round in 0..<48 {
                for namespace in namespaces {
                    _ = fetch(spec(uniquePath() + "-\(round)", namespace: namespace, size: 60_000))
                }
            }
            engine.dictionaries?.awaitTrainings()
            let trained = engine.dictionaries?.figures().values.filter { $0.id != nil }.count ?? 0
            XCTAssertGreaterThan(trained, 0, "no set reached 1,000 bodies or 4 MiB; the bound made room")
        }
    }

    func testANamespaceKeepsItsNewestVersionsAndAnEntryOfARetiredOneIsAMiss() throws {
        try onEachStore {
            restartEngine(limits: limits)
            let first = try trainDictionary()
            let old = uniquePath()
            XCTAssertEqual(bodyCodec?.dictionaryID(of: try storedRow(fetch(spec(old))).body), first)
            var ids = [first]
            for _ in 1...DictionaryTraining.keptVersions {
                XCTAssertEqual(engine.requestDictionary(for: "api"), .sampling(samples: 0, needed: samples))
                ids.append(try trainDictionary())
            }
            XCTAssertEqual(Set(ids).count, DictionaryTraining.keptVersions + 1)
            let kept = try XCTUnwrap(dictionaryStore?.loadDictionaries().filter { $0.namespace == "api" })
            XCTAssertEqual(Set(kept.map(\.id)), Set(ids.dropFirst()), "the store keeps the newest")
            XCTAssertEqual(engine.dictionaries?.figures()["api"]?.versions, DictionaryTraining.keptVersions)
            // The entry compressed with the retired one: a miss, fetched again, never other bytes.
            let again = fetch(spec(old))
            XCTAssertEqual(again.outcome, "miss")
            XCTAssertEqual(origin.count(old), 2)
            XCTAssertEqual(bodyCodec?.dictionaryID(of: try storedRow(again).body), ids.last)
        }
    }

    func testAtMostSoManyNamespacesSampleAndAnAbandonedOneGivesWay() throws {
        try onEachStore {
            restartEngine(limits: limits)
            for index in 0..<DictionaryTraining.maxNamespaces {
                XCTAssertEqual(engine.requestDictionary(for: "ns\(index)"), .sampling(samples: 0, needed: samples))
            }
            XCTAssertEqual(engine.requestDictionary(for: "one-more"), .tooManyNamespaces)
            clock.advance(by: DictionaryTraining.abandonedSetSeconds + 1)
            XCTAssertEqual(engine.requestDictionary(for: "one-more"), .sampling(samples: 0, needed: samples))
            XCTAssertEqual(engine.dictionaries?.figures().count, DictionaryTraining.maxNamespaces)
        }
    }

    func testWithDictionariesOffNoneIsTrainedAndAskingForOneIsRefused() throws {
        try onEachStore {
            var off = limits
            off.dictionaries = .off
            restartEngine(limits: off)
            for index in 0..<samples { _ = fetch(spec(uniquePath() + "-\(index)")) }
            engine.dictionaries?.awaitTrainings()
            XCTAssertNil(engine.dictionaries?.figures()["api"])
            XCTAssertEqual(engine.requestDictionary(for: "api"), .off)
        }
    }
}

final class ZstdDictionaryTests: XCTestCase {
    private let bodies = (0..<40).map { OriginScript.records(path: "/sample/\($0)", size: 3000) }

    func testATrainedDictionaryCarriesItsIdAndReadsOnlyWhereRegistered() throws {
        let codec = ZstdCodec()
        let trained = try XCTUnwrap(codec.train(samples: bodies, capacity: 8 << 10, id: 40_000))
        XCTAssertLessThanOrEqual(trained.count, 8 << 10)
        let dictionary = BodyDictionary(id: 40_000, namespace: "api", trainedAt: 0, bytes: trained)
        XCTAssertFalse(codec.register(BodyDictionary(id: 40_001, namespace: "api", trainedAt: 0, bytes: trained)), "another id")
        XCTAssertFalse(codec.register(BodyDictionary(id: 40_000, namespace: "api", trainedAt: 0, bytes: Array(trained.prefix(8)))))
        XCTAssertNil(codec.compress(bodies[0], dictionary: 40_000), "not registered yet")
        XCTAssertTrue(codec.register(dictionary))
        let body = OriginScript.records(path: "/not/a/sample", size: 3000)
        let compressed = try XCTUnwrap(codec.compress(body, dictionary: 40_000))
        XCTAssertEqual(codec.dictionaryID(of: compressed), 40_000)
        XCTAssertEqual(codec.decompress(compressed, maxBytes: 1 << 20), body)
        XCTAssertNil(codec.decompress(compressed, maxBytes: body.count - 1))
        let elsewhere = ZstdCodec()
        XCTAssertNil(elsewhere.decompress(compressed, maxBytes: 1 << 20), "a codec without the dictionary")
        XCTAssertTrue(elsewhere.register(dictionary))
        XCTAssertEqual(elsewhere.decompress(compressed, maxBytes: 1 << 20), body)
        codec.unregister(40_000)
        XCTAssertNil(codec.decompress(compressed, maxBytes: 1 << 20))
        // The same id with other bytes (damaged, or changed in the store): refused, never other bytes.
        var damaged = trained
        for index in stride(from: damaged.count - 4000, to: damaged.count, by: 7) { damaged[index] ^= 0x21 }
        let other = ZstdCodec()
        XCTAssertTrue(other.register(BodyDictionary(id: 40_000, namespace: "api", trainedAt: 0, bytes: damaged)))
        XCTAssertNil(other.decompress(compressed, maxBytes: 1 << 20))
        XCTAssertNil(codec.dictionaryID(of: try XCTUnwrap(codec.compress(body))))
    }
}

final class DictionaryTrainingTests: XCTestCase {
    func testWhenANamespaceSamplesAndTrains() {
        let rules = DictionaryTraining(samples: 100)
        XCTAssertTrue(rules.samples(bodyCount: 1))
        XCTAssertTrue(rules.samples(bodyCount: DictionaryTraining.maxSampleBytes))
        XCTAssertFalse(rules.samples(bodyCount: DictionaryTraining.maxSampleBytes + 1))
        XCTAssertFalse(rules.samples(bodyCount: 0))
        XCTAssertFalse(rules.isFull(count: 99))
        XCTAssertTrue(rules.isFull(count: 100))
        XCTAssertTrue(DictionaryTraining.fits(1000, in: DictionaryTraining.maxSetBytes - 1000))
        XCTAssertFalse(DictionaryTraining.fits(1001, in: DictionaryTraining.maxSetBytes - 1000))
        XCTAssertTrue(rules.wantsSamples(trainedAt: nil, now: 5))
        XCTAssertFalse(rules.wantsSamples(trainedAt: 1000, now: 1000 + DictionaryTraining.refreshSeconds - 1))
        XCTAssertTrue(rules.wantsSamples(trainedAt: 1000, now: 1000 + DictionaryTraining.refreshSeconds))
        XCTAssertFalse(DictionaryTraining.off.samples(bodyCount: 100))
        XCTAssertFalse(DictionaryTraining.off.wantsSamples(trainedAt: nil, now: 0))
        XCTAssertEqual(DictionaryTraining.dictionaryBytes(sampleBytes: 1000), 4 << 10)
        XCTAssertEqual(DictionaryTraining.dictionaryBytes(sampleBytes: 100_000), 10_000)
        XCTAssertEqual(DictionaryTraining.dictionaryBytes(sampleBytes: 4 << 20), DictionaryTraining.maxDictionaryBytes)
    }
}
