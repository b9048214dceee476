import Foundation
import KVStore

/// Values written on the command line as `defaults write` takes them: a type option and its
/// text (`-int 3`), and the members of `-array` and `-dict`, each either typed (`port -int
/// 8080`) or, untyped, a string.
///
/// Invariant: every typed text becomes a value here and only here, for `kvsfs set`'s own
/// options and for members alike. `-data` is base64, as kvsfs has always taken it (`defaults`
/// takes hex).
enum DefaultsArguments {
    /// The scalar types a member may be given as.
    enum MemberType {
        case string, integer, real, boolean, date, data
    }

    /// Each type option, by kvsfs's name and by `defaults`'s.
    static let typeOptions: [String: MemberType] = [
        "-string": .string, "-int": .integer, "-integer": .integer, "-real": .real, "-float": .real,
        "-bool": .boolean, "-boolean": .boolean, "-date": .date, "-data": .data,
    ]

    /// The value `text` stands for as `type`; `option` names it in a refusal.
    static func value(_ type: MemberType, _ text: String, option: String) throws -> PropertyListValue {
        switch type {
        case .string:
            return .string(text)
        case .integer:
            guard let integer = IntegerArgument(argument: text) else {
                throw CommandFailure("\(option) takes an integer from -9223372036854775808 to 18446744073709551615, not '\(text)'")
            }
            return integer.value
        case .real:
            guard let real = Double(text) else { throw CommandFailure("\(option) takes a number, not '\(text)'") }
            return .real(real)
        case .boolean:
            switch text.lowercased() {
            case "true", "yes", "1": return .boolean(true)
            case "false", "no", "0": return .boolean(false)
            default: throw CommandFailure("\(option) takes true, false, yes, no, 1 or 0, not '\(text)'")
            }
        case .date:
            guard let date = ISO8601DateFormatter().date(from: text) else {
                throw CommandFailure("\(option) takes ISO 8601 such as 2026-11-22T10:00:00Z, not '\(text)'")
            }
            return .date(date)
        case .data:
            guard let data = Data(base64Encoded: text) else { throw CommandFailure("\(option) takes base64, and '\(text)' is not") }
            return .data(data)
        }
    }

    /// The members of `-array ITEM...` (or `-array-add`), in order.
    static func arrayMembers(_ words: [String], option: String) throws -> [PropertyListValue] {
        var remaining = words[...]
        var members = [PropertyListValue]()
        while !remaining.isEmpty {
            members.append(try member(&remaining, option: option, of: "the member \(members.count)"))
        }
        return members
    }

    /// The members of `-dict KEY VALUE...` (or `-dict-add`); a key given twice keeps its last
    /// value, as with `defaults`.
    static func dictionaryMembers(_ words: [String], option: String) throws -> [String: PropertyListValue] {
        var remaining = words[...]
        var members = [String: PropertyListValue]()
        while let key = remaining.popFirst() {
            if typeOptions[key] != nil || nestedOptions.contains(key) {
                throw CommandFailure("\(option) takes a key before each value, and '\(key)' is a type: write KEY \(key) VALUE")
            }
            guard !remaining.isEmpty else { throw CommandFailure("\(option): the key '\(key)' has no value") }
            members[key] = try member(&remaining, option: option, of: "the key '\(key)'")
        }
        return members
    }

    /// What `-array` and `-dict` cannot hold on the command line: a nested container.
    private static let nestedOptions: Swift.Set<String> = ["-array", "-dict", "-array-add", "-dict-add"]

    /// One member, typed or plain, taken from the front of `words`; `member` names it in a refusal.
    private static func member(_ words: inout ArraySlice<String>, option: String, of member: String) throws -> PropertyListValue {
        let word = words.removeFirst()
        if let type = typeOptions[word] {
            guard let text = words.popFirst() else { throw CommandFailure("\(option): \(word) for \(member) has no value") }
            return try value(type, text, option: word)
        }
        if nestedOptions.contains(word) {
            throw CommandFailure("\(option) holds scalars only: give a nested \(word.dropFirst()) with -plist")
        }
        // "-5" is a string, as `defaults` takes it; "-interger" is a misspelt type, not a string.
        if word.count > 1, word.hasPrefix("-"), word.dropFirst().first?.isLetter == true {
            throw CommandFailure("\(option): '\(word)' is no type (use -string, -int, -float, -bool, -date or -data; -string \(word) for a string)")
        }
        return .string(word)
    }
}
