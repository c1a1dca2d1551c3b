// One description per setting an operator can give. A `Setting` names the config file's key
// (also the name of `larder serve`'s property for it), the command-line option, the environment
// variable if any, and a help sentence; its default is read from `LarderConfiguration()` (never
// written twice) and shown as an operator would write it. It knows how each source's value is
// read into its field: the config file's (ConfigFile), the environment's, and the value
// swift-argument-parser parsed for its option. The table of every setting is `Setting.all`.
//
// Each source keeps its own words for errors, as before the table: the file names the file and
// the key, the command line the option, the environment the variable.

import LarderCore

public struct Setting: Sendable {
    /// The config file's key, and the name of `larder serve`'s property for it.
    public let key: String
    /// The command-line option's long name, without `--`.
    public let option: String
    /// The environment variable that sets it, if any.
    public let environment: String?
    /// What it does, without its default or environment variable (`help` adds them).
    public let summary: String
    /// The default, as an operator would write it.
    public let defaultText: String
    /// How the option is given on the command line.
    public let form: Form
    /// The section of `larder serve --help` it is listed in (set by the table, Setting.all).
    public internal(set) var group: Group = .network

    /// The sections of `larder serve --help`, in order.
    public enum Group: String, Sendable, CaseIterable {
        case network, storage, upstream, safety, observability

        /// The section's title in `--help` (shown in capitals, followed by OPTIONS).
        public var title: String { "\(rawValue) options" }
    }

    public enum Form: Sendable {
        /// `--option VALUE`.
        case value
        /// `--option VALUE`, repeatable; the values given replace the default list.
        case repeated
        /// `--option` alone (or `--no-option` too).
        case flag
    }

    /// What to do with the environment variable set to "".
    enum EmptyEnvironment: Sendable {
        /// Use it as the value.
        case kept
        /// As if it were unset.
        case ignored
        /// Refuse it: an empty token would leave routes open silently.
        case refused
    }

    let readFile: @Sendable (ConfigFile.Value, inout LarderConfiguration) throws(ConfigurationError) -> Void
    let readEnvironment: @Sendable (String, inout LarderConfiguration) throws(ConfigurationError) -> Void
    let readCommandLine: @Sendable (Any, inout LarderConfiguration) throws(ConfigurationError) -> Void
    private let valueText: @Sendable (LarderConfiguration) -> String
    /// Sets the value in the second configuration to the first's.
    let copy: @Sendable (LarderConfiguration, inout LarderConfiguration) -> Void

    /// The value in `configuration`, as an operator would write it.
    public func describe(_ configuration: LarderConfiguration) -> String { valueText(configuration) }

    /// Whether a reload (SIGHUP) applies a new value to the running service; the others (the
    /// listeners, the store, the upstream transport and its address rules) take a restart, and
    /// a reload keeps their running values and names them.
    public var isLive: Bool { Self.liveKeys.contains(key) }

    /// The keys of the settings a reload applies.
    public static let liveKeys: Set<String> = [
        "upstreams", "adminToken", "metricsToken", "logFormat", "logLevel", "accessLog", "staleOnError", "tagHeaders",
        "redactQuery", "maxBodyBytes", "maxObjectBytes", "rangeFetchOver", "maxBatch", "maxChainSteps", "maxBatchBytes",
        "stripTargetedCacheControl", "readyWhileDegraded", "shutdownGrace", "serverNames", "targetedCacheControl",
        "passOwnCacheControl", "negativeTtl", "uncacheableMemory",
        "cacheStatusKey", "compressMinBytes", "compressTypes", "compressDictionarySamples"
    ]

    /// The keys of the settings a reload could not apply because their values changed, with the
    /// running values put back into `new`.
    public static func keepRestartOnly(from running: LarderConfiguration, in new: inout LarderConfiguration) -> [String] {
        var kept: [String] = []
        for setting in all where !setting.isLive && setting.describe(running) != setting.describe(new) {
            kept.append(setting.key)
            setting.copy(running, &new)
        }
        return kept
    }

    /// What a reload to `proposed` runs on a service started with `running`: the proposed live
    /// settings with the running restart-only ones, and the keys of those kept. That mix is
    /// validated too, since each half alone can be valid and the whole not (an upstream renamed
    /// while the kept `proxyRoot` names it; a `maxObjectBytes` above the kept `maxBytes`).
    public static func reload(
        to proposed: LarderConfiguration, running: LarderConfiguration
    ) throws(ConfigurationError) -> (configuration: LarderConfiguration, keptUntilRestart: [String]) {
        try proposed.validate()
        var next = proposed
        let kept = keepRestartOnly(from: running, in: &next)
        do throws(ConfigurationError) {
            try next.validate()
        } catch {
            throw ConfigurationError(
                "with the settings a reload keeps until a restart (\(kept.joined(separator: ", "))), "
                    + "the configuration would not be valid: \(error.description)")
        }
        return (next, kept)
    }

    /// The option's help: the summary, then whether it repeats, the environment variable and the
    /// default.
    public var help: String {
        let notes = [form == .repeated ? "repeatable" : nil, environment.map { "env \($0)" }, "default \(defaultText)"].compactMap { $0 }
        return "\(summary) (\(notes.joined(separator: "; ")))."
    }

    /// The setting whose config key is `key`; there must be one.
    public static func named(_ key: String) -> Setting {
        guard let setting = all.first(where: { $0.key == key }) else { preconditionFailure("no setting has the key '\(key)'") }
        return setting
    }

    /// Applies the value swift-argument-parser parsed for this setting's option (nil, empty or
    /// false when not given: nothing changes), of the type `larder serve` declares for it.
    public func apply(commandLine value: Any, to configuration: inout LarderConfiguration) throws(ConfigurationError) {
        try readCommandLine(value, &configuration)
    }

    /// Applies every setting's environment variable that is set in `environment`.
    public static func apply(environment: [String: String], to configuration: inout LarderConfiguration) throws(ConfigurationError) {
        for setting in all {
            guard let name = setting.environment, let raw = environment[name] else { continue }
            try setting.readEnvironment(raw, &configuration)
        }
    }

    /// The one place every kind below goes through. `Given` is the type of the option's
    /// property in `larder serve`; `commandLine` returns nil when the option was not given.
    private init<Field: SettingField, Given>(
        _ key: String, _ field: WritableKeyPath<LarderConfiguration, Field> & Sendable, option: String?, form: Form = .value,
        environment: String? = nil, unset: String?, summary: String, show: @escaping @Sendable (Field.Value) -> String,
        file: @escaping @Sendable (ConfigFile.Value) throws(ConfigurationError) -> Field.Value,
        fromEnvironment: @escaping @Sendable (_ name: String, _ raw: String) throws(ConfigurationError) -> Field.Value? = { _, _ in nil },
        commandLine: @escaping @Sendable (_ given: Given, _ option: String, _ current: Field) throws(ConfigurationError) -> Field.Value?
    ) {
        let option = option ?? Self.kebabCase(key)
        self.key = key
        self.option = option
        self.environment = environment
        self.summary = summary
        self.form = form
        guard let shown = LarderConfiguration()[keyPath: field].settingValue.map(show) ?? unset else {
            preconditionFailure("the setting '\(key)' has no default: say what nil means with `unset`")
        }
        self.defaultText = shown
        self.valueText = { configuration in configuration[keyPath: field].settingValue.map(show) ?? unset ?? "" }
        self.copy = { from, into in into[keyPath: field] = from[keyPath: field] }
        readFile = { value, configuration throws(ConfigurationError) in
            configuration[keyPath: field] = Field(settingValue: try file(value))
        }
        readEnvironment = { raw, configuration throws(ConfigurationError) in
            if let value = try fromEnvironment(environment ?? "", raw) { configuration[keyPath: field] = Field(settingValue: value) }
        }
        readCommandLine = { given, configuration throws(ConfigurationError) in
            guard let given = given as? Given else {
                preconditionFailure("larder serve declares --\(option) as \(type(of: given)), not \(Given.self)")
            }
            if let value = try commandLine(given, option, configuration[keyPath: field]) {
                configuration[keyPath: field] = Field(settingValue: value)
            }
        }
    }

    /// `maxBytes` → `max-bytes`, as swift-argument-parser names an option after its property.
    static func kebabCase(_ name: String) -> String {
        name.reduce(into: "") { result, character in
            if character.isUppercase {
                result += "-" + character.lowercased()
            } else {
                result.append(character)
            }
        }
    }
}

/// A field's type: a value, or an optional one whose nil the setting describes in words.
protocol SettingField: SendableMetatype {
    associatedtype Value
    init(settingValue: Value)
    var settingValue: Value? { get }
}

extension Optional: SettingField {
    init(settingValue: Wrapped) { self = settingValue }
    var settingValue: Wrapped? { self }
}

extension Int: SettingField {
    init(settingValue: Int) { self = settingValue }
    var settingValue: Int? { self }
}

extension Double: SettingField {
    init(settingValue: Double) { self = settingValue }
    var settingValue: Double? { self }
}

extension Bool: SettingField {
    init(settingValue: Bool) { self = settingValue }
    var settingValue: Bool? { self }
}

extension String: SettingField {
    init(settingValue: String) { self = settingValue }
    var settingValue: String? { self }
}

extension Array: SettingField {
    init(settingValue: [Element]) { self = settingValue }
    var settingValue: [Element]? { self }
}

extension NamespaceBudgets: SettingField {
    init(settingValue: NamespaceBudgets) { self = settingValue }
    var settingValue: NamespaceBudgets? { self }
}

extension NegativeTTL: SettingField {
    init(settingValue: NegativeTTL) { self = settingValue }
    var settingValue: NegativeTTL? { self }
}

// The kinds of setting: how a value of each is read from every source and shown as a default.
extension Setting {
    typealias Field<Value> = WritableKeyPath<LarderConfiguration, Value> & Sendable

    /// Text. `empty` says what an empty environment variable means.
    static func text<F: SettingField>(
        _ key: String, _ field: Field<F>, environment: String? = nil, empty: EmptyEnvironment = .kept, unset: String? = nil,
        _ summary: String
    ) -> Setting where F.Value == String {
        Setting(
            key, field, option: nil, environment: environment, unset: unset, summary: summary, show: { $0 },
            file: { value throws(ConfigurationError) in try value.string() },
            fromEnvironment: { name, raw throws(ConfigurationError) in
                guard raw.isEmpty else { return raw }
                switch empty {
                case .kept: return raw
                case .ignored: return nil
                case .refused:
                    throw ConfigurationError(
                        "\(name) is set but empty: give a value, or unset it (an empty token would leave the routes open)")
                }
            },
            commandLine: { (given: String?, _, _) in given })
    }

    /// A whole number; in the environment, `expecting` names what it must be.
    static func integer<F: SettingField>(
        _ key: String, _ field: Field<F>, environment: String? = nil, expecting: String = "an integer", unset: String? = nil,
        _ summary: String
    ) -> Setting where F.Value == Int {
        Setting(
            key, field, option: nil, environment: environment, unset: unset, summary: summary, show: { String($0) },
            file: { value throws(ConfigurationError) in try value.integer() },
            fromEnvironment: { name, raw throws(ConfigurationError) in
                guard let number = Int(raw) else { throw ConfigurationError("\(name) '\(raw)' is not \(expecting)") }
                return number
            },
            commandLine: { (given: Int?, _, _) in given })
    }

    /// A count of megabytes, held in bytes.
    static func megabytes<F: SettingField>(_ key: String, _ field: Field<F>, unset: String? = nil, _ summary: String) -> Setting
    where F.Value == Int {
        Setting(
            key, field, option: nil, unset: unset, summary: summary, show: { String($0 >> 20) },
            file: { value throws(ConfigurationError) in try value.megabytes() },
            commandLine: { (given: Int?, option, _) throws(ConfigurationError) in
                guard let given else { return nil }
                guard (0...(1 << 30)).contains(given) else { throw ConfigurationError("--\(option) \(given) is out of range") }
                return given << 20
            })
    }

    /// Bytes, as a count or like 1GiB, 100MB; `example` follows a refusal on the command line.
    static func size<F: SettingField>(
        _ key: String, _ field: Field<F>, example: String? = nil, unset: String? = nil, _ summary: String
    ) -> Setting where F.Value == Int {
        Setting(
            key, field, option: nil, unset: unset, summary: summary, show: Self.bytesText,
            file: { value throws(ConfigurationError) in try value.size() },
            commandLine: { (given: String?, option, _) throws(ConfigurationError) in
                guard let given else { return nil }
                guard let bytes = Quantity.bytes(given) else {
                    throw ConfigurationError("--\(option) '\(given)' is not a size\(example.map { " (e.g. \($0))" } ?? "")")
                }
                return bytes
            })
    }

    /// Seconds, as a number.
    static func seconds(_ key: String, _ field: Field<Double>, _ summary: String) -> Setting {
        Setting(
            key, field, option: nil, unset: nil, summary: summary, show: Self.numberText,
            file: { value throws(ConfigurationError) in try value.number() },
            commandLine: { (given: Double?, _, _) in given })
    }

    /// Seconds, as a number or like 7d, 12h.
    static func duration(_ key: String, _ field: Field<Double>, _ summary: String) -> Setting {
        Setting(
            key, field, option: nil, unset: nil, summary: summary, show: Self.durationText,
            file: { value throws(ConfigurationError) in try value.duration() },
            commandLine: { (given: String?, option, _) throws(ConfigurationError) in
                guard let given else { return nil }
                guard let seconds = Quantity.seconds(given) else {
                    throw ConfigurationError("--\(option) '\(given)' is not a duration (e.g. 7d, 12h)")
                }
                return seconds
            })
    }

    /// One of two words, held as false for the first and true for the second.
    static func choice(_ key: String, _ field: Field<Bool>, _ first: String, or second: String, _ summary: String) -> Setting {
        Setting(
            key, field, option: nil, unset: nil, summary: summary, show: { $0 ? second : first },
            file: { value throws(ConfigurationError) in try value.either(first, or: second) },
            commandLine: { (given: String?, option, _) throws(ConfigurationError) in
                guard let given else { return nil }
                guard given == first || given == second else { throw ConfigurationError("--\(option) must be \(first) or \(second)") }
                return given == second
            })
    }

    /// Negative-caching lifetimes by status: in the file a mapping like `{404: 30s, 502: 5s}`; on
    /// the command line a repeatable `--option STATUS=DURATION`, each replacing that status's.
    static func negativeTTLs(_ key: String, _ field: Field<NegativeTTL>, option: String, _ summary: String) -> Setting {
        Setting(
            key, field, option: option, form: .repeated, unset: nil, summary: summary,
            show: { $0.isEmpty ? "none" : $0.description(duration: Self.durationText) },
            file: { value throws(ConfigurationError) in try value.negativeTTLs() },
            commandLine: { (given: [String], option, current) throws(ConfigurationError) in
                guard !given.isEmpty else { return nil }
                guard given != ["none"] else { return NegativeTTL() }
                var seconds = current.seconds
                for entry in given {
                    guard let equals = entry.firstIndex(of: "="), let status = NegativeTTL.status(entry[..<equals]),
                        let lifetime = Quantity.seconds(String(entry[entry.index(after: equals)...]))
                    else {
                        throw ConfigurationError("--\(option) '\(entry)' is not STATUS=DURATION (e.g. 404=30s)")
                    }
                    if let refusal = NegativeTTL.refusal(status: status, seconds: lifetime) {
                        throw ConfigurationError("--\(option) '\(entry)': \(refusal)")
                    }
                    seconds[status] = lifetime
                }
                return NegativeTTL(seconds)
            })
    }

    /// Namespaces' budgets: in the file `{NAME: {maxBytes: SIZE}}`, on the command line
    /// `--option NAME=SIZE`, repeatable (`none` for none).
    static func namespaceBudgets(_ key: String, _ field: Field<NamespaceBudgets>, option: String, _ summary: String) -> Setting {
        Setting(
            key, field, option: option, form: .repeated, unset: nil, summary: summary,
            show: { budgets in
                budgets.maxBytes.isEmpty
                    ? "none"
                    : budgets.maxBytes.sorted { $0.key < $1.key }.map { "\($0.key)=\(Self.bytesText($0.value))" }.joined(separator: ", ")
            },
            file: { value throws(ConfigurationError) in try value.namespaceBudgets() },
            commandLine: { (given: [String], option, current) throws(ConfigurationError) in
                guard !given.isEmpty else { return nil }
                guard given != ["none"] else { return NamespaceBudgets() }
                var budgets = current
                for entry in given {
                    guard let equals = entry.lastIndex(of: "="), let bytes = Quantity.bytes(String(entry[entry.index(after: equals)...]))
                    else {
                        throw ConfigurationError("--\(option) '\(entry)' is not NAMESPACE=SIZE (e.g. reports=200MB)")
                    }
                    budgets.maxBytes[String(entry[..<equals])] = bytes
                }
                return budgets
            })
    }

    /// On or off; on the command line, `--option` turns it on (it is off by default).
    static func flag(_ key: String, _ field: Field<Bool>, _ summary: String) -> Setting {
        Setting(
            key, field, option: nil, form: .flag, unset: nil, summary: summary, show: Self.onOff,
            file: { value throws(ConfigurationError) in try value.boolean() },
            commandLine: { (given: Bool, _, _) in given ? true : nil })
    }

    /// On or off; on the command line, `--option` or `--no-option`.
    static func toggle(_ key: String, _ field: Field<Bool>, _ summary: String) -> Setting {
        Setting(
            key, field, option: nil, form: .flag, unset: nil, summary: summary, show: Self.onOff,
            file: { value throws(ConfigurationError) in try value.boolean() },
            commandLine: { (given: Bool?, _, _) in given })
    }

    /// A list of text; on the command line, a repeatable option (`option` names one item).
    /// `noneWord`: the command line's `--option none` empties the list. `lowercased`: items are
    /// kept in lower case. `empty`: what an empty default means.
    static func list(
        _ key: String, _ field: Field<[String]>, option: String? = nil, noneWord: Bool = false, lowercased: Bool = false,
        empty: String = "none", _ summary: String
    ) -> Setting {
        let normal: @Sendable ([String]) -> [String] = { lowercased ? $0.map { $0.lowercased() } : $0 }
        return Setting(
            key, field, option: option, form: .repeated, unset: nil, summary: summary,
            show: { $0.isEmpty ? empty : $0.joined(separator: ", ") },
            file: { value throws(ConfigurationError) in normal(try value.strings()) },
            commandLine: { (given: [String], _, _) in
                guard !given.isEmpty else { return nil }
                return noneWord && given == ["none"] ? [] : normal(given)
            })
    }

    /// Named upstreams: the config file's full list, or `--upstream NAME=URL`, each replacing
    /// the upstream of its name.
    static func upstreams(_ key: String, _ field: Field<[NamedUpstream]>, option: String, _ summary: String) -> Setting {
        Setting(
            key, field, option: option, form: .repeated, unset: nil, summary: summary,
            show: { $0.isEmpty ? "none" : $0.map(\.name).joined(separator: ", ") },
            file: { value throws(ConfigurationError) in try value.upstreams() },
            commandLine: { (given: [String], option, current) throws(ConfigurationError) in
                guard !given.isEmpty else { return nil }
                var upstreams = current
                for entry in given {
                    guard let equals = entry.firstIndex(of: "=") else {
                        throw ConfigurationError("--\(option) '\(AddressRedaction.redacted(entry))' is not NAME=URL")
                    }
                    let name = String(entry[..<equals])
                    upstreams.removeAll { $0.name == name }
                    upstreams.append(NamedUpstream(name: name, baseURL: String(entry[entry.index(after: equals)...])))
                }
                return upstreams
            })
    }

    /// 1073741824 → 1GiB; a count that is no whole number of KiB stays a count.
    static func bytesText(_ bytes: Int) -> String {
        for (unit, shift) in [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)] where bytes >= 1 << shift && bytes % (1 << shift) == 0 {
            return "\(bytes >> shift)\(unit)"
        }
        return String(bytes)
    }

    /// 604800 → 7d; 90 → 90s.
    static func durationText(_ seconds: Double) -> String {
        for (unit, factor) in [("d", 86_400.0), ("h", 3600.0), ("m", 60.0)]
        where seconds >= factor && seconds.truncatingRemainder(dividingBy: factor) == 0 {
            return numberText(seconds / factor) + unit
        }
        return numberText(seconds) + "s"
    }

    /// 10.0 → 10; 1.5 → 1.5.
    static func numberText(_ number: Double) -> String {
        number == number.rounded() && abs(number) < 1e15 ? String(Int(number)) : String(number)
    }

    static func onOff(_ on: Bool) -> String { on ? "on" : "off" }
}
