/// What a change stamp from elsewhere must be before a replica takes it in: the rule every
/// door applies (the server and the file remote to a push, a mount to what it fetches).
///
/// - `time`: milliseconds since 1970, from 0 up to the end of year 9999, and no more than the
///   skew (`maximumSkew` unless configured) ahead of the receiver's clock: a device whose clock
///   runs ahead cannot make its changes win for years, nor pin every other device's clock. The
///   one exception is a stamp that succeeds the key's current one (at most a millisecond
///   later): a write replacing a change already stamped ahead is not refused for being later.
/// - `counter`: 0 to 2^31−1.
/// - `device`: 1 to 64 bytes of ASCII letters, digits, `-`, `_`, `.` and `:`.
public struct StampRule: Sendable, Equatable {
    /// The default skew: five minutes.
    public static let maximumSkew: Int64 = 5 * 60 * 1000
    /// 9999-12-31T23:59:59.999Z.
    public static let latestTime: Int64 = 253_402_300_799_999
    public static let maximumDeviceBytes = 64

    /// How far ahead of the receiver's clock a stamp may be, in milliseconds.
    public var skew: Int64

    public init(skew: Int64 = StampRule.maximumSkew) {
        self.skew = skew
    }

    /// Refuses a stamp outside the rule, given the receiver's clock in milliseconds and the
    /// key's current stamp there.
    public func check(_ stamp: ChangeStamp, now: Int64, current: ChangeStamp? = nil) throws(StoreError) {
        try checkFields(stamp)
        try checkSkew(stamp, now: now, current: current)
    }

    /// The parts of the rule that need no clock: the time's range, the counter, the device id.
    public func checkFields(_ stamp: ChangeStamp) throws(StoreError) {
        guard stamp.time >= 0, stamp.time <= Self.latestTime else {
            throw .invalidStamp("its time \(stamp.time) is outside 1970 to 9999")
        }
        guard stamp.counter >= 0 else { throw .invalidStamp("its counter \(stamp.counter) is negative") }
        try Self.checkDevice(stamp.device)
    }

    /// The skew, for a stamp whose fields are in range.
    public func checkSkew(_ stamp: ChangeStamp, now: Int64, current: ChangeStamp?) throws(StoreError) {
        guard stamp.time > Self.latestAcceptable(physical: now, skew: skew) else { return }
        if let current, stamp.time <= current.time.addingReportingOverflow(1).partialValue { return }
        let (ahead, overflow) = stamp.time.subtractingReportingOverflow(now)
        throw .invalidStamp("its time is \(overflow ? "far" : "\(ahead) ms") ahead of this clock (at most \(skew) ms allowed)")
    }

    /// The greatest time a stamp may have when the clock reads `physical`; never overflows.
    public static func latestAcceptable(physical: Int64, skew: Int64) -> Int64 {
        let (sum, overflow) = physical.addingReportingOverflow(max(0, skew))
        return overflow ? Int64.max : sum
    }

    static func checkDevice(_ device: String) throws(StoreError) {
        let bytes = device.utf8
        guard !bytes.isEmpty, bytes.count <= maximumDeviceBytes else {
            throw .invalidStamp("its device id is \(bytes.count) bytes (1 to \(maximumDeviceBytes) allowed)")
        }
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: ":"):
                continue
            default:
                throw .invalidStamp("its device id holds a byte 0x\(String(byte, radix: 16)) outside letters, digits, '-', '_', '.' and ':'")
            }
        }
    }
}
