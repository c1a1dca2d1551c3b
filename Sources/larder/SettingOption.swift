// `larder serve`'s options for the settings of LarderConfiguration. swift-argument-parser needs
// each option declared as a property; its name and help come from the setting's line in
// `Setting.all`, and what was parsed is read back by the property's name (the setting's key).

import ArgumentParser
import LarderService

extension Option {
    /// `--option VALUE` for the setting whose key is `key`.
    init<T: ExpressibleByArgument>(setting key: String) where Value == T? {
        let setting = Setting.named(key)
        self.init(name: .customLong(setting.option), help: ArgumentHelp(setting.help))
    }

    /// `--option VALUE`, repeatable, for the list setting whose key is `key`.
    init<T: ExpressibleByArgument>(wrappedValue: [T], setting key: String) where Value == [T] {
        let setting = Setting.named(key)
        self.init(wrappedValue: wrappedValue, name: .customLong(setting.option), help: ArgumentHelp(setting.help))
    }
}

extension Flag where Value == Bool {
    /// `--option`, which turns the setting whose key is `key` on.
    init(wrappedValue: Bool, setting key: String) {
        let setting = Setting.named(key)
        self.init(wrappedValue: wrappedValue, name: .customLong(setting.option), help: ArgumentHelp(setting.help))
    }
}

extension Flag where Value == Bool? {
    /// `--option` or `--no-option` for the setting whose key is `key`.
    init(setting key: String, inversion: FlagInversion) {
        let setting = Setting.named(key)
        self.init(name: .customLong(setting.option), inversion: inversion, help: ArgumentHelp(setting.help))
    }
}

/// A property swift-argument-parser filled, whatever its type.
protocol ParsedProperty {
    var parsedValue: Any { get }
}

extension Option: ParsedProperty {
    var parsedValue: Any { wrappedValue }
}

extension Flag: ParsedProperty {
    var parsedValue: Any { wrappedValue }
}

/// An option group, whose properties count as the command's own.
protocol ParsedGroup {
    var parsedGroup: any ParsableArguments { get }
}

extension OptionGroup: ParsedGroup {
    var parsedGroup: any ParsableArguments { wrappedValue }
}

extension ParsableArguments {
    /// What was parsed into each option and flag, by property name, those of option groups
    /// included. swift-argument-parser finds them the same way: by reflecting the command, whose
    /// `_name` holds the wrapper of `name`.
    var parsedProperties: [String: Any] {
        var values: [String: Any] = [:]
        for child in Mirror(reflecting: self).children {
            guard let label = child.label, label.hasPrefix("_") else { continue }
            if let property = child.value as? ParsedProperty {
                values[String(label.dropFirst())] = property.parsedValue
            } else if let group = child.value as? ParsedGroup {
                values.merge(group.parsedGroup.parsedProperties) { first, _ in first }
            }
        }
        return values
    }
}
