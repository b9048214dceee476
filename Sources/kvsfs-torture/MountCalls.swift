import Glibc

/// A system call on the mount that failed, and its errno.
struct CallFailure: Error, CustomStringConvertible {
    let call: String
    let path: String
    let code: Int32

    var description: String { "\(call) \(path): \(String(cString: strerror(code))) (errno \(code))" }
}

/// The POSIX calls the workload and the checker make on the mount: each returns what failed,
/// with its errno, rather than throwing away which call it was.
enum MountCalls {
    /// Writes `bytes` as the whole content of `path` in writes of `chunk` bytes:
    /// open(O_WRONLY|O_CREAT|O_TRUNC), write, close. It is acknowledged when close() returns 0.
    static func write(_ bytes: [UInt8], to path: String, chunk: Int) -> CallFailure? {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { return CallFailure(call: "open", path: path, code: errno) }
        var offset = 0
        while offset < bytes.count {
            let count = min(chunk, bytes.count - offset)
            let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, count) }
            guard written > 0 else {
                let failure = CallFailure(call: "write", path: path, code: errno)
                close(fd)
                return failure
            }
            offset += written
        }
        guard close(fd) == 0 else { return CallFailure(call: "close", path: path, code: errno) }
        return nil
    }

    static func rename(_ from: String, to: String) -> CallFailure? {
        Glibc.rename(from, to) == 0 ? nil : CallFailure(call: "rename", path: "\(from) -> \(to)", code: errno)
    }

    static func unlink(_ path: String) -> CallFailure? {
        Glibc.unlink(path) == 0 ? nil : CallFailure(call: "unlink", path: path, code: errno)
    }

    /// The whole content of `path`, or nil when there is no such file.
    static func read(_ path: String) -> Result<[UInt8]?, CallFailure> {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else {
            return errno == ENOENT ? .success(nil) : .failure(CallFailure(call: "open", path: path, code: errno))
        }
        defer { close(fd) }
        var content = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress!, $0.count) }
            if count < 0 { return .failure(CallFailure(call: "read", path: path, code: errno)) }
            if count == 0 { return .success(content) }
            content += buffer[..<count]
        }
    }

    /// The names in `directory`, but `.` and `..`.
    static func list(_ directory: String) -> Result<Set<String>, CallFailure> {
        guard let stream = opendir(directory) else { return .failure(CallFailure(call: "opendir", path: directory, code: errno)) }
        defer { closedir(stream) }
        var names = Set<String>()
        errno = 0
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
            if name != ".", name != ".." { names.insert(name) }
            errno = 0
        }
        if errno != 0 { return .failure(CallFailure(call: "readdir", path: directory, code: errno)) }
        return .success(names)
    }
}
