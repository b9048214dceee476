/// What a decode has used of its `PropertyListDecodingLimits`, counted as the readers go.
///
/// `bytes` is the length of the canonical XML (`PropertyListCodec.encodeXML`) of everything
/// decoded so far, counted element by element with the same tags, tabs and escapes the
/// encoder writes; it is exactly the encoder's length once the whole value is decoded. An
/// array or dictionary is counted in its empty form (`<array/>`) when it opens and in its full
/// form when it closes, so that the count never runs ahead of the value. A reader counts each
/// piece as soon as it has read it, before the arrays and dictionaries around it are built, and
/// a binary reader checks a container's stated count before reading its elements, so that a
/// value over the limits is refused before it takes the memory.
///
/// Depth is the number of arrays and dictionaries around a value: the top value is at depth 0.
struct DecodingBudget {
    let limits: PropertyListDecodingLimits
    private(set) var bytes: Int
    private(set) var objects = 0

    init(limits: PropertyListDecodingLimits) {
        self.limits = limits
        bytes = CanonicalXML.documentLength
    }

    /// One scalar at `depth` whose canonical element is `length` bytes long without its
    /// indentation (see the `CanonicalXML` lengths).
    mutating func scalar(length: Int, depth: Int) throws(StoreError) {
        try countObject()
        try add(length, depth)
    }

    /// A dictionary key whose line sits at `depth` (one more than its dictionary's).
    mutating func key(escapedLength: Int, depth: Int) throws(StoreError) {
        try countObject()
        try add(CanonicalXML.key(escapedLength: escapedLength), depth)
    }

    /// An array or dictionary opening at `depth`, counted as if empty.
    mutating func open(_ container: CanonicalXML.Container, depth: Int) throws(StoreError) {
        guard depth < limits.maxDepth else {
            throw .invalidPropertyList("arrays and dictionaries are nested more than \(limits.maxDepth) deep")
        }
        try countObject()
        try add(container.emptyLength, depth)
    }

    /// The container opened at `depth` closes holding `count` elements (entries for a dictionary).
    mutating func close(_ container: CanonicalXML.Container, count: Int, depth: Int) throws(StoreError) {
        guard count > 0 else { return }
        try add(container.fullLength - container.emptyLength, depth)
    }

    /// Refuses up front a container of `count` elements whose smallest possible canonical form
    /// or object count already passes the limits (binary lists state their counts first).
    func precheck(_ container: CanonicalXML.Container, count: Int, depth: Int) throws(StoreError) {
        let perElement = container == .array ? 1 : 2
        let (objectsNeeded, o1) = count.multipliedReportingOverflow(by: perElement)
        if o1 || objectsNeeded > limits.maxObjects - objects {
            throw .invalidPropertyList("the property list holds more than \(limits.maxObjects) objects")
        }
        let smallest = container == .array ? CanonicalXML.smallestElement : CanonicalXML.key(escapedLength: 0) + CanonicalXML.smallestElement
        let (perLine, o2) = (depth + 1).multipliedReportingOverflow(by: perElement)
        let (total, o3) = count.multipliedReportingOverflow(by: smallest + perLine)
        if o2 || o3 || total > limits.maxBytes - bytes {
            throw .valueTooLarge(size: o2 || o3 ? Int.max : bytes + total, limit: limits.maxBytes)
        }
    }

    private mutating func countObject() throws(StoreError) {
        objects += 1
        if objects > limits.maxObjects {
            throw .invalidPropertyList("the property list holds more than \(limits.maxObjects) objects")
        }
    }

    /// Adds one line of `length` bytes indented by `depth` tabs.
    private mutating func add(_ length: Int, _ depth: Int) throws(StoreError) {
        let (line, o1) = length.addingReportingOverflow(depth)
        let (sum, o2) = bytes.addingReportingOverflow(line)
        guard !o1, !o2 else { throw .valueTooLarge(size: Int.max, limit: limits.maxBytes) }
        bytes = sum
        if bytes > limits.maxBytes { throw .valueTooLarge(size: bytes, limit: limits.maxBytes) }
    }
}

/// The lengths of the pieces of canonical XML, without indentation: what
/// `PropertyListCodec.encodeXML` writes for each kind of element.
enum CanonicalXML {
    /// The header through `<plist version="1.0">\n`, and `</plist>\n`.
    static let documentLength = PropertyListCodec.xmlHeader.count + "</plist>\n".utf8.count

    enum Container {
        case array, dictionary

        /// `<array/>\n` or `<dict/>\n`.
        var emptyLength: Int { self == .array ? 9 : 8 }
        /// `<array>\n` and `</array>\n` (each indented), or the same for `dict`; the extra
        /// indentation of the closing line is added here as one more `depth`, by `close`.
        var fullLength: Int { self == .array ? 17 : 15 }
    }

    /// `<string>…</string>\n`
    static func string(escapedLength: Int) -> Int { 18 + escapedLength }
    /// `<key>…</key>\n`
    static func key(escapedLength: Int) -> Int { 12 + escapedLength }
    /// `<integer>…</integer>\n`
    static func integer(digits: Int) -> Int { 20 + digits }
    /// `<real>…</real>\n`
    static func real(textLength: Int) -> Int { 14 + textLength }
    /// `<true/>\n` or `<false/>\n`
    static func boolean(_ value: Bool) -> Int { value ? 8 : 9 }
    /// `<date>YYYY-MM-DDThh:mm:ssZ</date>\n`
    static let date = 34
    /// `<data>…</data>\n` around the base64 of `byteCount` bytes (no line breaks).
    static func data(byteCount: Int) -> Int { 14 + (byteCount / 3 + (byteCount % 3 == 0 ? 0 : 1)) * 4 }
    /// The shortest element there is (`<true/>\n`, `<dict/>\n`).
    static let smallestElement = 8

    static func real(_ value: Double) -> Int { real(textLength: PropertyListCodec.realText(value).utf8.count) }

    static func integer(_ value: Int) -> Int {
        var digits = value < 0 ? 2 : 1
        var rest = value.magnitude / 10
        while rest > 0 { digits += 1; rest /= 10 }
        return integer(digits: digits)
    }

    static func integer(_ value: UInt64) -> Int {
        var digits = 1
        var rest = value / 10
        while rest > 0 { digits += 1; rest /= 10 }
        return integer(digits: digits)
    }

    /// The length of `text` once escaped as `PropertyListCodec.encodeXML` escapes it: `&`,
    /// `<` and `>` as entities, control characters but tab and newline, and U+FFFE and U+FFFF,
    /// as decimal character references (`&#1;`).
    static func escapedLength(_ text: UnsafeBufferPointer<UInt8>) -> Int {
        var length = text.count
        // The two bytes before this one, for U+FFFE and U+FFFF (EF BF BE/BF).
        var before: (UInt8, UInt8) = (0, 0)
        for byte in text {
            switch byte {
            case UInt8(ascii: "&"): length += 4
            case UInt8(ascii: "<"), UInt8(ascii: ">"): length += 3
            case UInt8(ascii: "\t"), UInt8(ascii: "\n"): break
            case 0..<10: length += 3  // `&#N;`
            case 10..<0x20: length += 4  // `&#NN;`
            case 0xBE where before == (0xEF, 0xBF), 0xBF where before == (0xEF, 0xBF): length += 5  // 3 bytes as `&#6553N;`
            default: break
            }
            before = (before.1, byte)
        }
        return length
    }

    static func escapedLength(_ text: String) -> Int {
        var text = text
        return text.withUTF8 { escapedLength($0) }
    }
}
