// A reference between the steps of a chain (POST /chain): `{{root.path}}` inside any string of a
// step's request (or of `output`). `root` is a step id or `input`; the path is `.name`, `[3]` or
// `[*]` (every element) segments into that step's result
// `{"status", "headers", "body", "state", "error"}`. Parsing a reference and reading its value
// from the results so far; ChainTemplate.swift writes values into strings.

import Foundation

public struct ChainReference: Sendable, Equatable, CustomStringConvertible {
    public enum Segment: Sendable, Equatable {
        case member(String)
        case index(Int)
        case every
    }

    public let root: String
    public let segments: [Segment]
    public let text: String

    public var description: String { text }

    /// Parses `user.body.items[0].id` (without the braces).
    public init?(parsing text: String) {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        var index = trimmed.startIndex
        func name() -> String {
            let start = index
            while index < trimmed.endIndex,
                trimmed[index].isLetter || trimmed[index].isNumber || trimmed[index] == "_" || trimmed[index] == "-"
            {
                index = trimmed.index(after: index)
            }
            return String(trimmed[start..<index])
        }
        let root = name()
        guard !root.isEmpty else { return nil }
        var segments: [Segment] = []
        while index < trimmed.endIndex {
            if trimmed[index] == "." {
                index = trimmed.index(after: index)
                let member = name()
                guard !member.isEmpty else { return nil }
                segments.append(.member(member))
            } else if trimmed[index] == "[" {
                guard let close = trimmed[index...].firstIndex(of: "]") else { return nil }
                let inner = trimmed[trimmed.index(after: index)..<close]
                if inner == "*" {
                    segments.append(.every)
                } else if let number = Int(inner), number >= 0 {
                    segments.append(.index(number))
                } else {
                    return nil
                }
                index = trimmed.index(after: close)
            } else {
                return nil
            }
        }
        self.root = root
        self.segments = segments
        self.text = trimmed
    }

    /// The value at this path in `documents` (step results by id, and `input`); nil when any
    /// part is missing. `[*]` maps the rest of the path over every element.
    public func resolve(in documents: [String: JSONValue]) -> JSONValue? {
        guard let start = documents[root] else { return nil }
        return Self.walk(start, segments[...])
    }

    private static func walk(_ value: JSONValue, _ rest: ArraySlice<Segment>) -> JSONValue? {
        guard let segment = rest.first else { return value }
        switch (segment, value) {
        case (.member(let name), .object(let members)):
            return members[name].flatMap { walk($0, rest.dropFirst()) }
        case (.index(let index), .array(let elements)):
            return index < elements.count ? walk(elements[index], rest.dropFirst()) : nil
        case (.every, .array(let elements)):
            var mapped: [JSONValue] = []
            for element in elements {
                guard let value = walk(element, rest.dropFirst()) else { return nil }
                mapped.append(value)
            }
            return .array(mapped)
        default:
            return nil
        }
    }
}

extension ChainReference {
    /// `document` cut down to what `paths` (segments after the root) reach, so that a chain
    /// keeps of each result only what later steps and its output read: members no path names
    /// are dropped, elements no path reaches become null (indexes still count), and a path that
    /// ends keeps its whole subtree. Every path resolves in the result as in `document`.
    public static func pruned(_ document: JSONValue, keeping paths: [ArraySlice<Segment>]) -> JSONValue {
        if paths.contains(where: \.isEmpty) { return document }
        switch document {
        case .object(let members):
            var byName: [String: [ArraySlice<Segment>]] = [:]
            for path in paths {
                if case .member(let name)? = path.first { byName[name, default: []].append(path.dropFirst()) }
            }
            var kept: [String: JSONValue] = [:]
            for (name, rest) in byName {
                if let member = members[name] { kept[name] = pruned(member, keeping: rest) }
            }
            return .object(kept)
        case .array(let elements):
            var every: [ArraySlice<Segment>] = []
            var byIndex: [Int: [ArraySlice<Segment>]] = [:]
            for path in paths {
                switch path.first {
                case .every?: every.append(path.dropFirst())
                case .index(let index)?: byIndex[index, default: []].append(path.dropFirst())
                default: break
                }
            }
            guard every.isEmpty else {
                return .array(elements.enumerated().map { index, element in pruned(element, keeping: every + (byIndex[index] ?? [])) })
            }
            let reached = byIndex.keys.filter { $0 < elements.count }
            guard let last = reached.max() else { return .array([]) }
            return .array((0...last).map { index in byIndex[index].map { pruned(elements[index], keeping: $0) } ?? .null })
        default:
            return document
        }
    }
}
