// The IndexedDB databases of the page's origin, for a named profile (app/profiles/state.py): each database's name and
// version, each object store's keyPath, autoIncrement and indexes, and its records as [key, value] pairs read with a
// cursor. Run with Runtime.evaluate (awaitPromise, returnByValue): JSON only, so what structured-clones but is not JSON
// (Date, ArrayBuffer and typed arrays, Blob and File, Map, Set, RegExp, BigInt, undefined, NaN, -0) is written as
// {"$rd:t": kind, ...}, which restore.js turns back. A record holding what cannot be carried at all (a CryptoKey, a
// file-system handle, a cycle) is left out and counted in its store's `skipped`. A failure rejects the whole read: the
// caller then keeps what the profile had for the origin rather than saving a partial copy.
// `limit` (bytes, or null): past it nothing is returned but {tooLarge: bytes}, so what crosses CDP stays under the
// profile's cap: refused before reading when the origin's IndexedDB usage on disk is already over it, else the
// read stops at the record that passes it (each record counted as JSON as it is read).
(async function (limit) {
  if (!/^https?:$/.test(location.protocol) || !self.indexedDB || !indexedDB.databases) return [];
  var TAG = '$rd:t', blobs = [], used = 0, over = false;
  if (limit != null && navigator.storage && navigator.storage.estimate) {
    var usage = ((await navigator.storage.estimate()).usageDetails || {}).indexedDB || 0;
    if (usage > limit) return {tooLarge: usage};
  }

  function base64(buffer) {
    var text = '', bytes = new Uint8Array(buffer);
    for (var i = 0; i < bytes.length; i += 32768) text += String.fromCharCode.apply(null, bytes.subarray(i, i + 32768));
    return btoa(text);
  }

  function tagged(kind, fields) { var out = {}; out[TAG] = kind; return Object.assign(out, fields); }

  function encode(value, path) {
    if (value === null || typeof value === 'string' || typeof value === 'boolean') return value;
    if (typeof value === 'number') {
      return isFinite(value) && !Object.is(value, -0) ? value
        : tagged('number', {v: Object.is(value, -0) ? '-0' : String(value)});
    }
    if (value === undefined) return tagged('undefined', {});
    if (typeof value === 'bigint') return tagged('bigint', {v: String(value)});
    if (typeof value !== 'object') throw new Error(typeof value + ' is not carried');
    if (path.indexOf(value) >= 0) throw new Error('a cycle is not carried');
    path = path.concat([value]);
    var kind = Object.prototype.toString.call(value).slice(8, -1);
    if (Array.isArray(value)) return value.map(function (item) { return encode(item, path); });
    if (kind === 'Date') return tagged('Date', {v: isNaN(value.getTime()) ? null : value.getTime()});
    if (kind === 'RegExp') return tagged('RegExp', {v: value.source, flags: value.flags});
    if (kind === 'ArrayBuffer') return tagged('ArrayBuffer', {v: base64(value)});
    if (ArrayBuffer.isView(value)) {
      return tagged(kind, {v: base64(value.buffer.slice(value.byteOffset, value.byteOffset + value.byteLength))});
    }
    if (kind === 'Blob' || kind === 'File') {
      used += Math.ceil(value.size / 3) * 4;  // its base64, counted before its bytes are read
      var blob = tagged(kind, {type: value.type, v: ''});
      if (kind === 'File') Object.assign(blob, {name: value.name, lastModified: value.lastModified});
      blobs.push(value.arrayBuffer().then(function (buffer) { blob.v = base64(buffer); }));
      return blob;
    }
    if (kind === 'Map') {
      return tagged('Map', {v: Array.from(value, function (e) { return [encode(e[0], path), encode(e[1], path)]; })});
    }
    if (kind === 'Set') return tagged('Set', {v: Array.from(value, function (item) { return encode(item, path); })});
    if (kind !== 'Object') throw new Error(kind + ' is not carried');
    var fields = {};
    Object.keys(value).forEach(function (key) { fields[key] = encode(value[key], path); });
    return TAG in value ? tagged('Object', {v: fields}) : fields;
  }

  function result(request) {
    return new Promise(function (resolve, reject) {
      request.onsuccess = function () { resolve(request.result); };
      request.onerror = function () { reject(request.error); };
    });
  }

  function readStore(transaction, name) {
    var source = transaction.objectStore(name), cursor = source.openCursor();
    var store = {name: name, keyPath: source.keyPath, autoIncrement: source.autoIncrement, indexes: [], records: [],
                 skipped: 0};
    Array.from(source.indexNames).forEach(function (indexName) {
      var index = source.index(indexName);
      store.indexes.push({name: index.name, keyPath: index.keyPath, unique: index.unique, multiEntry: index.multiEntry});
    });
    cursor.onsuccess = function () {
      var at = cursor.result;
      if (!at) return;
      try {
        var record = [encode(at.primaryKey, []), encode(at.value, [])];
        used += JSON.stringify(record).length;
        store.records.push(record);
      } catch (e) { store.skipped++; }
      if (limit != null && used > limit) { over = true; transaction.abort(); return; }
      at.continue();
    };
    return store;
  }

  async function readDatabase(name) {
    var opening = indexedDB.open(name);
    opening.onupgradeneeded = function () { opening.transaction.abort(); };  // deleted meanwhile: do not create it
    var database = await result(opening);
    try {
      var names = Array.from(database.objectStoreNames), stores = [];
      if (names.length) {
        var transaction = database.transaction(names, 'readonly');
        stores = names.map(function (storeName) { return readStore(transaction, storeName); });
        await new Promise(function (resolve, reject) {
          transaction.oncomplete = resolve;
          transaction.onerror = transaction.onabort = function () { reject(transaction.error); };
        });
      }
      return {name: database.name, version: database.version, stores: stores};
    } finally {
      database.close();
    }
  }

  var databases = [];
  try {
    for (var info of await indexedDB.databases()) databases.push(await readDatabase(info.name));
  } catch (e) {
    if (over) return {tooLarge: used};
    throw e;
  }
  if (limit != null && used > limit) return {tooLarge: used};
  await Promise.all(blobs);
  return databases;
})
