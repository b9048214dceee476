import FuseKit
import Glibc
import KVStore
import Logging

/// Why the mount refused an operation that the store never saw.
public enum FileSystemError: Error, Equatable, Sendable {
    case noSuchFile
    /// A file the mount removed between the kernel's look-up of its name and an open of it
    /// (ESTALE): the kernel looks the name up again and opens what it finds then.
    case removedSinceLookup
    case fileExists
    case notADirectory
    /// The mount is one flat directory.
    case directoriesNotSupported
    case linksNotSupported
    case specialFilesNotSupported
    /// Files show fixed permissions (0644, the directory 0755) and owner (the mounting user);
    /// a mode they do not already give is refused (`ModeRule`).
    case permissionsFixed
    case ownershipFixed
    case noSuchAttribute
    case attributeReadOnly
    case attributesNotSupported
    case badHandle
    case notOpenForWriting
    /// An empty file is not a property list, so it cannot become a key's value.
    case emptyValue
    /// The name is not the canonical name of any key (see `KeyFileName`).
    case nonCanonicalName(String)
    case tooManyEditorFiles(limit: Int)
    case editorFileTooLarge(limit: Int)
    case exchangeNotSupported
    /// The mount is read-only (`-o ro`).
    case readOnlyMount
    /// The file shows the default registered for a key without a value: there is no value to
    /// remove or move. Writing the file gives the key a value.
    case registeredDefault(String)
}

extension FileSystemError: CustomStringConvertible {
    public var description: String {
        switch self {
        case .noSuchFile: "no such file"
        case .removedSinceLookup: "the file was removed since its name was looked up"
        case .fileExists: "the file exists"
        case .notADirectory: "the mount is one flat directory"
        case .directoriesNotSupported: "the mount holds no directories"
        case .linksNotSupported: "the mount holds no links"
        case .specialFilesNotSupported: "the mount holds only regular files"
        case .permissionsFixed: "files have fixed permissions, and they do not give that mode"
        case .ownershipFixed: "keys belong to the mounting user"
        case .noSuchAttribute: "no such attribute"
        case .attributeReadOnly: "the attribute is read-only"
        case .attributesNotSupported: "no such attributes here"
        case .badHandle: "the file handle is not open"
        case .notOpenForWriting: "the file is not open for writing"
        case .emptyValue: "an empty file is not a value"
        case .nonCanonicalName(let name): "\(name.debugDescription) is not the name of a key"
        case .tooManyEditorFiles(let limit): "the mount already holds \(limit) editor files"
        case .editorFileTooLarge(let limit): "an editor file may hold at most \(limit) bytes"
        case .exchangeNotSupported: "names cannot be exchanged"
        case .readOnlyMount: "the mount is read-only"
        case .registeredDefault(let key): "\(key.debugDescription) shows a registered default, not a value"
        }
    }
}

/// The one place that turns an error into the errno a request is answered with.
public enum ErrnoMapping {
    public static func errno(for error: any Error, logger: Logger) -> Int32 {
        switch error {
        case let error as StoreError:
            switch error {
            case .invalidPropertyList, .emptyKey, .invalidKey, .invalidStamp, .invalidDeviceName, .invalidStoreName,
                 .invalidSchema, .schemaViolation, .invalidCondition: return EINVAL
            case .readOnly: return EROFS
            case .conflictChanged, .unpushedChange: return EAGAIN
            case .valueTooLarge: return EFBIG
            case .storeFull: return EDQUOT
            case .tooManyKeys: return ENOSPC
            case .keyTooLong: return ENAMETOOLONG
            case .noSuchKey: return ENOENT
            case .storeInUse: return EBUSY
            case .diskFull(_, .space): return ENOSPC
            case .diskFull(_, .userQuota): return EDQUOT
            case .database(let message):
                logger.error("store failure answered with EIO: \(message)")
                return EIO
            }
        case let error as FileSystemError:
            switch error {
            case .noSuchFile: return ENOENT
            case .removedSinceLookup: return ESTALE
            case .fileExists: return EEXIST
            case .notADirectory: return ENOTDIR
            case .directoriesNotSupported, .linksNotSupported, .specialFilesNotSupported,
                 .permissionsFixed, .ownershipFixed, .attributeReadOnly, .registeredDefault: return EPERM
            case .noSuchAttribute: return ENODATA
            case .attributesNotSupported: return EOPNOTSUPP
            case .badHandle, .notOpenForWriting: return EBADF
            case .emptyValue, .nonCanonicalName, .exchangeNotSupported: return EINVAL
            case .tooManyEditorFiles: return ENOSPC
            case .editorFileTooLarge: return EFBIG
            case .readOnlyMount: return EROFS
            }
        case let error as SyncFailure:
            switch error {
            case .connectionRefused: return ECONNREFUSED
            case .timedOut: return ETIMEDOUT
            case .unreachable: return EHOSTUNREACH
            case .notTrusted: return ECONNABORTED
            case .connectionLost: return ECONNRESET
            case .unavailable: return EIO
            case .busy: return EAGAIN
            case .authorizationRefused: return EACCES
            case .storeLimit: return EDQUOT
            }
        case let error as Errno:
            return error.rawValue
        default:
            logger.error("unexpected error answered with EIO: \(error)")
            return EIO
        }
    }
}
