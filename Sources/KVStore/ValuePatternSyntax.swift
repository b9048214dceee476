/// The syntax of a schema's regular expressions, read into a tree that `ValuePattern` compiles.
///
/// What is taken: literal characters; `.` (any character but a newline); classes `[a-z_]`,
/// `[^0-9]`; the escapes `\d \D \w \W \s \S \n \r \t` and a backslash before any punctuation;
/// groups `(…)` and `(?:…)`; alternation `|`; the quantifiers `* + ? {n} {n,} {n,m}` (a `?`
/// after one is taken and changes nothing, as a whole-string match has no laziness to show);
/// `^` at the very start and `$` at the very end, which say what every pattern means anyway:
/// a pattern matches the whole string. What is refused, with a reason: backreferences,
/// lookaround, word boundaries, possessive quantifiers, a brace that does not begin a
/// quantifier, and anything past the bounds in `ValuePattern.Limits`.
enum PatternNode: Sendable, Equatable {
    case empty
    case scalars(ScalarSet)
    indirect case sequence([PatternNode])
    indirect case alternatives([PatternNode])
    indirect case repeated(PatternNode, least: Int, most: Int?)
}

/// A set of Unicode scalars as sorted, disjoint ranges of their values.
struct ScalarSet: Sendable, Equatable {
    private(set) var ranges: [ClosedRange<UInt32>]

    init(_ ranges: [ClosedRange<UInt32>]) {
        var sorted = ranges.sorted { $0.lowerBound < $1.lowerBound }
        var merged = [ClosedRange<UInt32>]()
        for range in sorted {
            if let last = merged.last, range.lowerBound <= last.upperBound &+ 1 {
                merged[merged.count - 1] = last.lowerBound...max(last.upperBound, range.upperBound)
            } else {
                merged.append(range)
            }
        }
        sorted = merged
        self.ranges = sorted
    }

    static func just(_ scalar: Unicode.Scalar) -> ScalarSet { ScalarSet([scalar.value...scalar.value]) }
    static let everything = ScalarSet([0...0x10FFFF])
    static let anyButNewline = ScalarSet([0...0x09, 0x0B...0x10FFFF])
    static let digits = ScalarSet([0x30...0x39])
    static let wordCharacters = ScalarSet([0x30...0x39, 0x41...0x5A, 0x5F...0x5F, 0x61...0x7A])
    static let spaces = ScalarSet([0x09...0x0D, 0x20...0x20])

    var complement: ScalarSet {
        var result = [ClosedRange<UInt32>]()
        var next: UInt32 = 0
        for range in ranges {
            if range.lowerBound > next { result.append(next...(range.lowerBound - 1)) }
            next = range.upperBound + 1
        }
        if next <= 0x10FFFF { result.append(next...0x10FFFF) }
        return ScalarSet(result)
    }

    func contains(_ scalar: Unicode.Scalar) -> Bool {
        let value = scalar.value
        var low = 0, high = ranges.count
        while low < high {
            let middle = (low + high) / 2
            if ranges[middle].upperBound < value { low = middle + 1 } else { high = middle }
        }
        return low < ranges.count && ranges[low].contains(value)
    }
}

/// Reads a pattern's text into a `PatternNode`, refusing what `PatternNode` says is refused.
struct PatternParser {
    private let scalars: [Unicode.Scalar]
    private var position = 0
    private var depth = 0
    private let source: String

    /// Parses `source`, whose length the caller has bounded.
    static func parse(_ source: String) throws(StoreError) -> PatternNode {
        var body = Array(source.unicodeScalars)
        if body.first == "^" { body.removeFirst() }
        if body.last == "$", !endsInEscape(body.dropLast()) { body.removeLast() }
        var parser = PatternParser(scalars: body, source: source)
        let node = try parser.alternatives()
        if parser.position < parser.scalars.count {
            // Only an unmatched `)` stops the top level early.
            throw parser.refusal("an unmatched ')'")
        }
        return node
    }

    /// Whether `scalars` ends in a backslash that escapes what follows (an odd run of them).
    private static func endsInEscape(_ scalars: ArraySlice<Unicode.Scalar>) -> Bool {
        scalars.reversed().prefix { $0 == "\\" }.count % 2 == 1
    }

    private init(scalars: [Unicode.Scalar], source: String) {
        self.scalars = scalars
        self.source = source
    }

    private func refusal(_ reason: String) -> StoreError {
        .invalidSchema("the pattern \(source.debugDescription): \(reason)")
    }

    private var next: Unicode.Scalar? { position < scalars.count ? scalars[position] : nil }

    private mutating func alternatives() throws(StoreError) -> PatternNode {
        var branches = [try sequence()]
        while next == "|" {
            position += 1
            branches.append(try sequence())
        }
        return branches.count == 1 ? branches[0] : .alternatives(branches)
    }

    private mutating func sequence() throws(StoreError) -> PatternNode {
        var items = [PatternNode]()
        while let scalar = next, scalar != "|", scalar != ")" {
            let atom = try atom()
            items.append(try quantified(atom))
        }
        switch items.count {
        case 0: return .empty
        case 1: return items[0]
        default: return .sequence(items)
        }
    }

    private mutating func atom() throws(StoreError) -> PatternNode {
        guard let scalar = next else { throw refusal("it ends too soon") }
        position += 1
        switch scalar {
        case "(":
            depth += 1
            guard depth <= ValuePattern.Limits.groupDepth else {
                throw refusal("groups nest deeper than \(ValuePattern.Limits.groupDepth)")
            }
            if next == "?" {
                guard position + 1 < scalars.count, scalars[position + 1] == ":" else {
                    throw refusal("lookaround and other (? groups are not supported; (?: is")
                }
                position += 2
            }
            let inner = try alternatives()
            guard next == ")" else { throw refusal("a '(' is never closed") }
            position += 1
            depth -= 1
            return inner
        case ".": return .scalars(.anyButNewline)
        case "[": return .scalars(try characterClass())
        case "\\": return .scalars(try escape())
        case "*", "+", "?": throw refusal("'\(scalar)' has nothing to repeat")
        case "{": throw refusal("a '{' that does not follow something to repeat; write \\{ for a brace")
        case "}": throw refusal("an unmatched '}'; write \\} for a brace")
        case "^", "$": throw refusal("'\(scalar)' is taken only at the very start ('^') or end ('$'): a pattern always matches the whole string")
        default: return .scalars(.just(scalar))
        }
    }

    private mutating func quantified(_ atom: PatternNode) throws(StoreError) -> PatternNode {
        guard let scalar = next else { return atom }
        let least: Int, most: Int?
        switch scalar {
        case "*": (least, most) = (0, nil); position += 1
        case "+": (least, most) = (1, nil); position += 1
        case "?": (least, most) = (0, 1); position += 1
        case "{": (least, most) = try counts()
        default: return atom
        }
        if next == "?" { position += 1 }  // lazy: the same set of whole-string matches
        if let following = next, "*+?{".unicodeScalars.contains(following) {
            throw refusal("'\(following)' repeats a repetition; group it with (?:…) to repeat it")
        }
        return .repeated(atom, least: least, most: most)
    }

    /// `{n}`, `{n,}` or `{n,m}`, with the brace at `position`.
    private mutating func counts() throws(StoreError) -> (Int, Int?) {
        position += 1
        let least = try number()
        var most: Int? = least
        if next == "," {
            position += 1
            most = next == "}" ? nil : try number()
        }
        guard next == "}" else { throw refusal("a repetition count is {n}, {n,} or {n,m}") }
        position += 1
        if let most, most < least { throw refusal("the repetition {\(least),\(most)} counts down") }
        return (least, most)
    }

    private mutating func number() throws(StoreError) -> Int {
        var value = 0, digits = 0
        while let scalar = next, scalar.isASCII, let digit = Int(String(scalar)) {
            value = value * 10 + digit
            digits += 1
            position += 1
            guard value <= ValuePattern.Limits.repetitionCount else {
                throw refusal("a repetition count above \(ValuePattern.Limits.repetitionCount)")
            }
        }
        guard digits > 0 else { throw refusal("a repetition count is {n}, {n,} or {n,m}") }
        return value
    }

    private mutating func characterClass() throws(StoreError) -> ScalarSet {
        var negated = false
        if next == "^" { negated = true; position += 1 }
        var ranges = [ClosedRange<UInt32>]()
        var first = true
        while true {
            guard let scalar = next else { throw refusal("a '[' is never closed") }
            if scalar == "]", !first { position += 1; break }
            first = false
            position += 1
            let low: Unicode.Scalar
            if scalar == "\\" {
                let escaped = try escape()
                guard escaped.ranges.count == 1, escaped.ranges[0].count == 1,
                      let single = Unicode.Scalar(escaped.ranges[0].lowerBound) else {
                    ranges += escaped.ranges
                    continue
                }
                low = single
            } else {
                low = scalar
            }
            if next == "-", position + 1 < scalars.count, scalars[position + 1] != "]" {
                position += 1
                guard var high = next else { throw refusal("a '[' is never closed") }
                position += 1
                if high == "\\" {
                    let escaped = try escape()
                    guard escaped.ranges.count == 1, escaped.ranges[0].count == 1,
                          let single = Unicode.Scalar(escaped.ranges[0].lowerBound) else {
                        throw refusal("a range in a class ends in a class escape")
                    }
                    high = single
                }
                guard low.value <= high.value else { throw refusal("the range \(low)-\(high) counts down") }
                ranges.append(low.value...high.value)
            } else {
                ranges.append(low.value...low.value)
            }
        }
        let set = ScalarSet(ranges)
        return negated ? set.complement : set
    }

    /// The set an escape stands for, with the backslash already read.
    private mutating func escape() throws(StoreError) -> ScalarSet {
        guard let scalar = next else { throw refusal("it ends in a lone backslash") }
        position += 1
        switch scalar {
        case "d": return .digits
        case "D": return ScalarSet.digits.complement
        case "w": return .wordCharacters
        case "W": return ScalarSet.wordCharacters.complement
        case "s": return .spaces
        case "S": return ScalarSet.spaces.complement
        case "n": return .just("\n")
        case "r": return .just("\r")
        case "t": return .just("\t")
        case "b", "B":
            throw refusal("word boundaries (\\\(scalar)) are not supported")
        case "1"..."9":
            throw refusal("backreferences (\\\(scalar)) are not supported: a schema's patterns match in linear time")
        default:
            guard scalar.isASCII, !scalar.properties.isAlphabetic, !("0"..."9").contains(scalar) else {
                throw refusal("the escape \\\(scalar) is not supported")
            }
            return .just(scalar)
        }
    }
}
