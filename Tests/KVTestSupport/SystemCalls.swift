import Glibc

/// libc calls the Glibc module does not import, looked up at run time.
public enum SystemCalls {
    public static let renameNoReplace: UInt32 = 1

    /// renameat2(2) on two paths; returns 0 or -1 with errno set.
    public static func rename(_ from: String, _ to: String, flags: UInt32) -> Int32 {
        typealias Function = @convention(c) (Int32, UnsafePointer<CChar>, Int32, UnsafePointer<CChar>, UInt32) -> Int32
        let function = unsafeBitCast(dlsym(UnsafeMutableRawPointer(bitPattern: 0), "renameat2"), to: Function.self)
        return function(AT_FDCWD, from, AT_FDCWD, to, flags)
    }

    /// getxattr(2); returns the value, or nil with errno set.
    public static func extendedAttribute(_ path: String, _ name: String) -> String? {
        typealias Function = @convention(c) (UnsafePointer<CChar>, UnsafePointer<CChar>, UnsafeMutableRawPointer?, Int) -> Int
        let function = unsafeBitCast(dlsym(UnsafeMutableRawPointer(bitPattern: 0), "getxattr"), to: Function.self)
        var buffer = [UInt8](repeating: 0, count: 256)
        let count = buffer.withUnsafeMutableBytes { function(path, name, $0.baseAddress, $0.count) }
        return count < 0 ? nil : String(decoding: buffer.prefix(count), as: UTF8.self)
    }
}
